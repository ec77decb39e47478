"""Bytes moved and FLOPs of one kernel call, from its arguments: THE table of formulas.

    kind                weight bytes          activation bytes (f32)        KV cache bytes
    matmul              stored W (+ bias)     4*T*(in + out)                -
    matmul_group        sum of stored W       4*T*(in + sum out)            -
    matmul_glu          W_gate + W_up         4*T*(in + d_ff)               -
    rms_norm_add        4*d (norm weight)     4*T*d*(2, 4 with residual)    -
    rms_norm            4*d (norm weight)     4*R*d*2 (R rows: T, or T*heads) -
    rope_store(_paged)  -                     4*T*hd*(2H + 2n_kv) + tables  written: 2*T*n_kv*hd*b
    attention(_paged)   -                     4*T*H*hd*2 (q in, out)        read: 2*n_kv*L*hd*b
    embedding           the T rows' bytes     4*T*d (out)                   -
    output_norm         4*d (+ bias)          4*T*d*2                       -
    argmax              -                     4*n_vocab (the logits)        -

    kind                FLOPs
    matmul(_group)      2*in*out*T (out summed over a group's weights)
    matmul_glu          2*in*(2*d_ff)*T
    rms_norm_add        T*d*(4, 5 with residual)
    rms_norm            4*R*d
    rope_store(_paged)  3*T*(H + n_kv)*rot_dim
    attention(_paged)   4*H*hd*(keys seen, summed over the T query rows)
    embedding           0 (a lookup: its decoding is not counted)
    output_norm         4*T*d
    argmax              n_vocab (compares)

T tokens (rows) of the call, `in`/`out` a weight's columns/rows, d the model width, H/n_kv
query/KV heads, hd the head dim, L the positions the call reads (from the oldest any
query row sees to the newest), keys seen by query row t: its position + 1 (capped
by the window). Stored W is the weight's bytes as it sits in memory (its quantized size:
what a matvec must stream), the bias included. FLOPs count the multiply-adds of the
products (2 each) and the per-element work of norms and RoPE; softmax and activation
functions are left out (a few FLOPs per score or feature, small against the products).
Activations are float32; b is the KV cache's item size.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

# llama.cpp's tensor names for the projection roles of apr_core.model.transformer.Block.
ROLE_LABELS = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "qkv": "attn_qkv",
               "o": "attn_output", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
F32 = 4


class Cost(NamedTuple):
    """What one call moved and computed."""
    label: Optional[str]            # the weights it used ("attn_q+attn_k+attn_v"), or None
    tensors: Tuple[str, ...]        # their tensor names
    tokens: int                     # rows T of the call
    weight_bytes: int
    act_bytes: int
    kv_bytes: int
    flops: int


NO_COST = Cost(None, (), 0, 0, 0, 0, 0)


class WeightNames:
    """The model's projections by id (and by the id of their stored bytes, which is all a
    "matmul" kernel sees), each with its label."""

    def __init__(self, transformer: Any) -> None:
        self.labels: Dict[int, str] = {}
        self.by_data: Dict[int, Any] = {}
        for block in transformer.blocks:
            for role, linear in block.linears.items():
                if linear is not None:
                    self._add(linear, ROLE_LABELS.get(role, role))
        self._add(transformer.lm_head, "lm_head")   # tied: the embedding's Linear is the head

    def _add(self, linear: Any, label: str) -> None:
        self.labels[id(linear)] = label
        if linear.data is not None:
            self.by_data[id(linear.data)] = linear

    def label(self, linear: Any) -> str:
        return self.labels.get(id(linear), linear.name)


def _linears(names: WeightNames, linears: Sequence[Any], x: np.ndarray) -> Cost:
    t, d_in = x.shape[0], x.shape[-1]
    out = sum(l.shape[0] for l in linears)
    return Cost("+".join(names.label(l) for l in linears), tuple(l.name for l in linears), t,
                sum(l.nbytes for l in linears), F32 * t * (d_in + out), 0, 2 * d_in * out * t)


def matmul(names: WeightNames, data: np.ndarray, dtype: Any, shape: Tuple[int, int],
           x: np.ndarray, *_: Any) -> Cost:
    linear = names.by_data.get(id(data))
    if linear is not None:
        return _linears(names, [linear], x)
    out_dim, in_dim = shape                  # a weight outside the model's projections
    t = x.shape[0]
    return Cost("?", (), t, int(data.nbytes), F32 * t * (in_dim + out_dim), 0,
                2 * out_dim * in_dim * t)


def matmul_group(names: WeightNames, linears: Sequence[Any], x: np.ndarray) -> Cost:
    return _linears(names, linears, x)


def matmul_glu(names: WeightNames, gate: Any, up: Any, x: np.ndarray, act: str) -> Cost:
    t, d_in, d_ff = x.shape[0], x.shape[-1], gate.shape[0]
    return Cost(names.label(gate) + "+" + names.label(up), (gate.name, up.name), t,
                gate.nbytes + up.nbytes, F32 * t * (d_in + d_ff), 0, 2 * d_in * 2 * d_ff * t)


def rms_norm_add(names: WeightNames, x: np.ndarray, a: Optional[np.ndarray],
                 weight: np.ndarray, eps: float) -> Cost:
    t, d = x.shape[0], x.shape[-1]
    residual = a is not None
    return Cost(None, (), t, int(weight.nbytes), F32 * t * d * (4 if residual else 2), 0,
                t * d * (5 if residual else 4))


def rms_norm(names: WeightNames, x: np.ndarray, weight: np.ndarray, eps: float) -> Cost:
    t, d = x.shape[0], x.shape[-1]
    rows = int(x.size // d)
    return Cost(None, (), t, int(weight.nbytes), F32 * rows * d * 2, 0, rows * d * 4)


def rope_store(names: WeightNames, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               cos: Optional[np.ndarray], sin: Optional[np.ndarray], dim: int, neox: bool,
               k_cache: np.ndarray, *_: Any) -> Cost:
    t, heads, hd = q.shape
    kv_heads = k.shape[1]
    tables = 0 if cos is None else int(cos.nbytes + sin.nbytes)
    rotated = dim if cos is not None else 0
    return Cost(None, (), t, 0, F32 * t * hd * (2 * heads + 2 * kv_heads) + tables,
                2 * t * kv_heads * hd * k_cache.itemsize, 3 * t * (heads + kv_heads) * rotated)


def _attention(q: np.ndarray, k_cache: np.ndarray, q_pos: np.ndarray, window: int) -> Cost:
    t, heads, hd = q.shape
    pos = np.asarray(q_pos, np.int64)                               # [T]
    seen = pos + 1                                                  # [T] keys per query row
    first = 0
    if window:
        seen = np.minimum(seen, window)
        first = max(0, int(pos.min()) - window + 1)
    keys = int(pos.max()) + 1 - first                               # positions read
    read = 2 * k_cache.shape[0] * keys * hd * k_cache.itemsize      # K and V
    return Cost(None, (), t, 0, F32 * t * heads * hd * 2, read,
                4 * heads * hd * int(seen.sum()))


def attention(names: WeightNames, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
              n_keys: int, q_pos: np.ndarray, scale: float, window: int) -> Cost:
    return _attention(q, k_cache, q_pos, window)


def attention_paged(names: WeightNames, q: np.ndarray, k_pool: np.ndarray,
                    v_pool: np.ndarray, tables: np.ndarray, block: int, q_pos: np.ndarray,
                    scale: float, window: int) -> Cost:
    # one sequence per call here (a profile is a batch of one): keys read as for `attention`
    return _attention(q, k_pool, q_pos, window)


def embedding(names: WeightNames, linear: Any, ids: Any) -> Cost:
    """The embedding lookup: only the rows of the ids are read and decoded."""
    t, d = int(np.size(ids)), linear.shape[1]
    return Cost("token_embd", (linear.name,), t, t * linear.dtype.nbytes((d,)), F32 * t * d,
                0, 0)


def output_norm(names: WeightNames, norm: Any, x: np.ndarray) -> Cost:
    t, d = x.shape[0], x.shape[-1]
    weights = norm.weight.nbytes + (0 if norm.bias is None else norm.bias.nbytes)
    return Cost(None, (), t, int(weights), F32 * t * d * 2, 0, 4 * t * d)


def argmax(names: WeightNames, logits: np.ndarray) -> Cost:
    """Greedy sampling: the profile's runner picks each token with argmax."""
    return Cost(None, (), 1, 0, int(logits.nbytes), 0, int(logits.size))


# kernel-registry kind (and the model parts timed without a kernel, the runner's argmax)
# -> the cost of a call, from (names, *the call's arguments)
COSTS: Dict[str, Callable[..., Cost]] = {
    "matmul": matmul,
    "matmul_group": matmul_group,
    "matmul_glu": matmul_glu,
    "rms_norm_add": rms_norm_add,
    "rms_norm": rms_norm,
    "rope_store": rope_store,
    "rope_store_paged": rope_store,
    "attention": attention,
    "attention_paged": attention_paged,
    "embedding": embedding,
    "output_norm": output_norm,
    "argmax": argmax,
}


def cost_of(kind: str, names: WeightNames, args: Tuple[Any, ...]) -> Cost:
    """The cost of one call of `kind` (NO_COST for a kind the table does not know)."""
    formula = COSTS.get(kind)
    return NO_COST if formula is None else formula(names, *args)


__all__ = ["Cost", "COSTS", "NO_COST", "ROLE_LABELS", "WeightNames", "cost_of"]
