"""numba CPU version of the fused kind "decoder_block" (apr_core.model.fused): a whole
decoder layer as one compiled call, for one sequence's cache or a continuous-batching
step over the paged block pool (rows of many sequences, each attending to its own keys).

Why: a layer is a dozen kernel calls, and from Python each costs 5-15 us of wrapper code,
dispatch and allocation -- 3.5 ms of SmolLM2-135M's 13 ms per decoded token went there,
outside the matvecs. Here the layer runs the very kernels the separate kinds run (`pool`
tasks for the projections and attention, `fused_layers` loops for the norms and RoPE), in
the reference's order with its roundings, so a layer's result is bit-identical to the
kinds called one by one from `Transformer.run_block`.

A layer runs here when it has: RMSNorms without bias before attention and MLP and no
others (no q/k norms, no post-norms); q, k, v (or one fused qkv), o, gate, up and down
weights quantized in memory (`cpu.weight_table`), biases on qkv, o and down only; a
SiLU-gated MLP; float32 activations and RoPE tables, caches of any KV type
(`kv_rows`) whose head_dim the attention kernel handles. Up to
`cpu.DOT_MAX_TOKENS` tokens the projections are integer dots, above it float products of
dequantized rows, as `cpu.numba_matmul` chooses. Any other layer (LayerNorm, Gemma's extra
norms, dense weights) runs the model's own `run_block`: `layer_gaps` names what forced it,
in the family contracts' words, and it is logged once per model and reason (logger
"apr.numba", level INFO), so the slow path is never taken silently.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

import numpy as np
from numba import njit

from apr_core.model import fused

from .. import cpu, pool
from .fused_layers import (attention_chunks, attention_into, kernel_caches, rms_rows, rope_rows,
                           NO_ROWS)
from ..vector.fastexp import silu_mul_inplace

LOG = logging.getLogger("apr.numba")
F32 = np.float32
_NO_BIAS = np.zeros(0, np.float32)

# `shape` words of `decoder_step` (int64).
(S_HEADS, S_KV_HEADS, S_HEAD_DIM, S_ROT_DIM, S_NEOX, S_KEYS, S_WINDOW, S_QKV_CHUNKS,
 S_O_CHUNKS, S_GLU_CHUNKS, S_DOWN_CHUNKS, S_ATTN_CHUNKS, S_BLOCK, S_MANY, S_KV_KIND) = range(15)
SHAPE_WORDS = 15


@njit(cache=True)
def _add_bias(y, bias):
    """`y [T, n] += bias [n]` (nothing for an empty bias)."""
    if bias.shape[0] > 0:
        for t in range(y.shape[0]):
            for i in range(y.shape[1]):
                y[t, i] += bias[i]


@njit(cache=True)
def _project(ctl, task, fargs, table, bias, x, cols, chunks, many):
    """`x [T, in]` . the weights of `table` (+ bias) -> `[T, cols]`: integer dots for
    few tokens, float products of dequantized rows for `many` (as `cpu.numba_matmul`)."""
    y = np.empty((x.shape[0], cols), np.float32)
    if many:
        pool.products(ctl, task, fargs, table, x, y, chunks)
    else:
        pool.dots(ctl, task, fargs, table, x, y, chunks)
    _add_bias(y, bias)
    return y


@njit(cache=True)
def _glu(ctl, task, fargs, glu_table, h, chunks, many):
    """SiLU(h . gate) * (h . up) -> `[T, d_ff]`; for `many` tokens the gate and up rows
    run as one products task, then the activation (`fused_layers.matmul_glu`'s order)."""
    t_count, ff = h.shape[0], glu_table[0, pool.T_ROWS]
    if many:
        both = np.empty((t_count, 2 * ff), np.float32)              # [T, gate | up]
        pool.products(ctl, task, fargs, glu_table, h, both, chunks)
        gate = np.ascontiguousarray(both[:, :ff])
        silu_mul_inplace(gate, np.ascontiguousarray(both[:, ff:]))
        return gate
    gate = np.empty((t_count, ff), np.float32)                      # [T, d_ff] each
    up = np.empty((t_count, ff), np.float32)
    m = np.empty((t_count, ff), np.float32)
    pool.glu(ctl, task, fargs, glu_table, h, gate, up, m, chunks)
    return m


@njit(cache=True)
def decoder_step(ctl, task, fargs, x, norm_weights, eps, qkv_table, qkv_bias, o_table,
                 o_bias, glu_table, down_table, down_bias, shape, cos, sin, k_cache,
                 v_cache, slots, tables, positions, scale):
    """One layer on `x [T, d]` -> `[T, d]`; token t's K and V stored at slot `slots[t]`,
    its query attending to its own sequence's keys through `tables[t]` (blocks of
    `shape[S_BLOCK]` slots; a contiguous cache is one block).

    `norm_weights [2, d]` and `eps [2]`: attention and MLP RMSNorms; tables and biases as
    `cpu.weight_table` and the Linears hold them; `cos, sin [T, rot/2]`; caches
    `[n_kv, slots, hd]`; `shape` the int64 words S_*."""
    t_count, d = x.shape
    heads, kv_heads, hd = shape[S_HEADS], shape[S_KV_HEADS], shape[S_HEAD_DIM]
    q_dim, kv_dim = heads * hd, kv_heads * hd
    many = shape[S_MANY] != 0

    s = np.empty_like(x)                                            # [T, d] each
    h = np.empty_like(x)
    rms_rows(x, NO_ROWS, norm_weights[0], eps[0], s, h)             # s: a copy of x
    qkv = _project(ctl, task, fargs, qkv_table, qkv_bias, h, q_dim + 2 * kv_dim,
                   shape[S_QKV_CHUNKS], many)                       # [T, q + 2 kv]
    q = np.ascontiguousarray(qkv[:, :q_dim]).reshape((t_count, heads, hd))
    k = np.ascontiguousarray(qkv[:, q_dim:q_dim + kv_dim]).reshape((t_count, kv_heads, hd))
    v = np.ascontiguousarray(qkv[:, q_dim + kv_dim:]).reshape((t_count, kv_heads, hd))
    q_rot = np.empty((t_count, heads, hd), np.float32)              # [T, H, hd]
    rope_rows(q, k, v, cos, sin, shape[S_ROT_DIM], shape[S_NEOX] != 0, shape[S_KV_KIND],
              k_cache, v_cache, slots, q_rot)
    att = np.empty((t_count, heads, hd), np.float32)                # [T, H, hd]
    attention_into(ctl, task, fargs, q_rot, k_cache, v_cache, shape[S_KV_KIND],
                   shape[S_KEYS], tables, shape[S_BLOCK], positions, scale, shape[S_WINDOW],
                   att, shape[S_ATTN_CHUNKS])
    o = _project(ctl, task, fargs, o_table, o_bias, att.reshape((t_count, q_dim)), d,
                 shape[S_O_CHUNKS], many)                           # [T, d]

    rms_rows(x, o, norm_weights[1], eps[1], s, h)                   # s = x + o
    m = _glu(ctl, task, fargs, glu_table, h, shape[S_GLU_CHUNKS], many)   # [T, d_ff]
    down = _project(ctl, task, fargs, down_table, down_bias, m, d, shape[S_DOWN_CHUNKS],
                    many)
    return s + down


class LayerPlan(NamedTuple):
    """What `decoder_step` needs of one layer that does not change between calls."""
    norm_weights: np.ndarray       # [2, d] float32: attention, MLP RMSNorm weights
    eps: np.ndarray                # [2] float32
    qkv: cpu.WeightTable
    qkv_bias: np.ndarray           # [q + 2 kv] float32, or empty
    o: cpu.WeightTable
    o_bias: np.ndarray
    glu: cpu.WeightTable           # gate, up
    down: cpu.WeightTable
    down_bias: np.ndarray
    rope_kind: str                 # "full" or "sliding" (the model's RoPE tables)
    window: int                    # sliding window, 0 for none


def _bias(linears) -> np.ndarray:
    """The concatenated biases of `linears` (zeros where one has none), or empty."""
    if all(l.bias is None for l in linears):
        return _NO_BIAS
    return np.concatenate([np.zeros(l.shape[0], np.float32) if l.bias is None
                           else np.asarray(l.bias, np.float32) for l in linears])


def _groups(block: Any) -> List[List[Any]]:
    """The layer's projections as `decoder_step` runs them: qkv, o, gate + up, down."""
    lin = block.linears
    qkv = [lin["qkv"]] if lin.get("qkv") is not None else [lin.get(n) for n in "qkv"]
    return [qkv, [lin.get("o")], [lin.get("gate"), lin.get("up")], [lin.get("down")]]


def layer_gaps(model: Any, block: Any) -> List[str]:
    """What of `block` `decoder_step` lacks, each named as the family contracts name it: a
    layer tensor role ("q_norm", "post_ffn_norm", "up_bias") or a constraint key
    ("activation", "norm_type", "mlp_type"); "weights" when a projection is not
    block-quantized in memory (`cpu.weight_table`: the file's dtype, not a contract
    feature). Empty exactly when `layer_plan` plans the layer."""
    cfg, lin, norms = model.config, block.linears, block.norms
    gaps = [role for role, norm in (("q_norm", block.q_norm), ("k_norm", block.k_norm),
                                    ("post_attn_norm", norms.get("post_attn_norm")),
                                    ("post_ffn_norm", norms.get("post_ffn_norm")))
            if norm is not None]
    if cfg.act != "silu":
        gaps.append("activation")
    pre_norms = [norms.get("attn_norm"), norms.get("ffn_norm")]
    if any(n is None or n.kind != "rms" for n in pre_norms):
        gaps.append("norm_type")
    gaps += [role + "_bias" for role, n in zip(("attn_norm", "ffn_norm"), pre_norms)
             if n is not None and n.bias is not None]
    if lin.get("gate") is None:
        gaps.append("mlp_type")                   # an MLP without a gate (GPT-2's)
    gaps += [role + "_bias" for role in ("gate", "up")
             if lin.get(role) is not None and lin[role].bias is not None]
    # the projections present (a missing gate is "mlp_type" above)
    groups = [[l for l in group if l is not None] for group in _groups(block)]
    if any(not group for group in groups) or \
            any(cpu.weight_table(group) is None for group in groups):
        gaps.append("weights")
    elif sum(l.shape[0] for l in groups[0]) != cfg.q_dim + 2 * cfg.kv_dim or \
            groups[1][0].shape[0] != cfg.d_model or groups[3][0].shape[0] != cfg.d_model or \
            groups[2][0].shape != groups[2][-1].shape:
        gaps.append("weights")                    # shapes no contract allows
    return gaps


def layer_plan(model: Any, block: Any) -> Optional[LayerPlan]:
    """The plan of `block`, or None when `decoder_step` does not handle the layer (then
    `layer_gaps` says why)."""
    if layer_gaps(model, block):
        return None
    cfg, norms = model.config, block.norms
    attn_norm, ffn_norm = norms["attn_norm"], norms["ffn_norm"]
    groups = _groups(block)
    qkv, o, down = groups[0], groups[1][0], groups[3][0]
    tables = [cpu.weight_table(group) for group in groups]        # cached: no second build
    return LayerPlan(
        np.stack([attn_norm.weight, ffn_norm.weight]).astype(np.float32),
        np.array([attn_norm.eps, ffn_norm.eps], np.float32),
        tables[0], _bias(qkv), tables[1], _bias([o]), tables[2], tables[3], _bias([down]),
        "sliding" if block.sliding else "full",
        int((cfg.sliding_window if block.sliding else None) or 0))


# block -> (its plan or None,); forgotten with the block.
_plans: "weakref.WeakKeyDictionary[Any, Tuple[Optional[LayerPlan]]]" = \
    weakref.WeakKeyDictionary()
# model -> the fallback reasons already logged for it; forgotten with the model.
_told: "weakref.WeakKeyDictionary[Any, Set[str]]" = weakref.WeakKeyDictionary()


def _fall_back(model: Any, block: Any, why: str) -> None:
    """Log, once per model and reason, that a layer runs the model's own `run_block`."""
    told = _told.setdefault(model, set())
    if why not in told:
        told.add(why)
        LOG.info("numba: layer %d of this %s model runs its own run_block, not the one-call "
                 "layer, which lacks: %s", block.index, model.config.arch, why)


def _plan_of(model: Any, block: Any) -> Optional[LayerPlan]:
    entry = _plans.get(block)
    if entry is None:
        entry = _plans[block] = (layer_plan(model, block),)
        if entry[0] is None:
            _fall_back(model, block, ", ".join(layer_gaps(model, block)))
    return entry[0]


def decoder_block(model: Any, block: Any, x: np.ndarray, positions: np.ndarray, cache: Any,
                  tables: Dict[str, Any]) -> np.ndarray:
    """Kind "decoder_block" (apr_core.model.fused), for a KVCache or a batch's BatchKV:
    both give their slots and block tables through `kernel_view`."""
    plan = _plan_of(model, block)
    t = x.shape[0]
    if plan is None or x.dtype != np.float32:
        return fused.decoder_block(model, block, x, positions, cache, tables)
    k_cache, v_cache = cache.layer(block.index)                     # [n_kv, slots, hd]
    rope = model.ropes.get(plan.rope_kind)
    if rope is None:
        cos = sin = NO_ROWS
    else:
        cos, sin = tables[plan.rope_kind]                           # [T, rot/2] each
    caches = kernel_caches(k_cache, v_cache, model.config.head_dim)   # (kind, k, v bytes)
    if caches is None or cos.dtype != np.float32:
        _fall_back(model, block, "KV cache rows of head_dim {} as {} (kernel_caches)".format(
            model.config.head_dim, k_cache.dtype) if caches is None else
            "RoPE tables as {}".format(cos.dtype))
        return fused.decoder_block(model, block, x, positions, cache, tables)
    slots, block_tables, block_slots = cache.kernel_view(t)
    cfg = model.config
    many = t > cpu.DOT_MAX_TOKENS
    workers = pool.get()
    n_keys = int(positions.max()) + 1
    shape = np.empty(SHAPE_WORDS, np.int64)
    shape[S_HEADS], shape[S_KV_HEADS], shape[S_HEAD_DIM] = (cfg.n_heads, cfg.n_kv_heads,
                                                            cfg.head_dim)
    shape[S_ROT_DIM] = 0 if rope is None else rope.dim
    shape[S_NEOX] = rope is not None and rope.style == "neox"
    shape[S_KEYS], shape[S_WINDOW] = n_keys, plan.window
    shape[S_BLOCK], shape[S_MANY], shape[S_KV_KIND] = block_slots, many, caches[0]
    for word, table in ((S_QKV_CHUNKS, plan.qkv), (S_O_CHUNKS, plan.o),
                        (S_GLU_CHUNKS, plan.glu), (S_DOWN_CHUNKS, plan.down)):
        shape[word] = workers.row_chunks(table.rows) if many else workers.chunks(table.nbytes)
    shape[S_ATTN_CHUNKS] = attention_chunks(workers, t * cfg.n_heads, n_keys)
    return decoder_step(*workers.shared, np.ascontiguousarray(x), plan.norm_weights,
                        plan.eps, plan.qkv.table, plan.qkv_bias, plan.o.table, plan.o_bias,
                        plan.glu.table, plan.down.table, plan.down_bias, shape,
                        np.ascontiguousarray(cos), np.ascontiguousarray(sin), caches[1],
                        caches[2], np.ascontiguousarray(slots, np.int64),
                        np.ascontiguousarray(block_tables, np.int32),
                        np.ascontiguousarray(positions, np.int64), float(model.attn_scale))


# kind -> numba version (registered by apr_native.backends for backend "numba").
KERNELS = {"decoder_block": decoder_block}

__all__ = ["KERNELS", "decoder_block", "decoder_step", "layer_gaps", "layer_plan",
           "LayerPlan"]
