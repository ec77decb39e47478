"""Fused per-layer kernels: the kernel-registry kinds a decoder block calls besides its
projections, with their numpy reference implementations.

A backend (numba, CUDA, the browser's wasm-simd) may register a faster version of any kind
under its own name; one missing falls back to the numpy reference here, so the model code
in `transformer.py` is the same for every backend. Every kind is keyed by dtype "*".

    kind           signature                                              result
    rms_norm_add   (x [T,d], a [T,d] | None, weight [d], eps)              (s, h) each [T,d]
    rms_norm       (x [..., d], weight [d], eps)                          [..., d]
    rope_store     (q [T,H,hd], k [T,n_kv,hd], v [T,n_kv,hd],              q_rot [T,H,hd]
                    cos [T,dim/2] | None, sin [T,dim/2] | None, dim, neox,
                    k_cache [n_kv,cap,hd], v_cache [n_kv,cap,hd], start)
    attention      (q [T,H,hd], k_cache, v_cache, n_keys, q_pos [T],      [T, H*hd]
                    scale, window)
    matmul_glu     (gate: Linear, up: Linear, x [T,d], act)                [T, d_ff]
    decoder_block  (model: Transformer, block, x [T,d], positions [T],     [T, d]
                    cache: KVCache | BatchKV, tables: {rope kind: (cos, sin)})
    rope_store_paged  (q, k, v, cos, sin, dim, neox,                        q_rot [T,H,hd]
                    k_pool [n_kv,slots,hd], v_pool [n_kv,slots,hd], slots [T])
    attention_paged   (q [T,H,hd], k_pool, v_pool, tables [T,blocks] int32,  [T, H*hd]
                    block, q_pos [T], scale, window)

- rms_norm_add: `s = x + a` (`x` itself when `a` is None), `h = rms_norm(s) * weight`.
- rms_norm: RMSNorm alone over the last axis (Q/K norms per head, sandwich norms).
- rope_store: rotate the first `dim` features of every q and k head (neox: feature i pairs
  with i + dim/2, else 2i with 2i + 1), store rotated k and v at cache positions
  `start .. start+T-1`, return rotated q. `cos` None: no rotation (learned positions).
- attention: grouped-query attention of q over cached keys `0 .. n_keys-1`; key j is
  visible to the query at position p iff j <= p and (window == 0 or p - j < window).
- matmul_glu: `ACTIVATION_FNS[act](gate.matmul(x)) * up.matmul(x)`.
- rope_store_paged: rope_store into a paged pool: token t's k and v go to slot `slots[t]`.
- attention_paged: query row t (at position q_pos[t]) attends to key positions 0..q_pos[t]
  of its own sequence, whose position j sits in slot
  `tables[t, j // block] * block + j % block` (window as for attention). Rows of several
  sequences share one call: that is a continuous-batching step.
- decoder_block: one whole decoder layer, `model.run_block(...)` (which calls the kinds
  above): a backend may run a layer it fully supports as one call, so a decode step does
  not pay Python's per-call costs a dozen times per layer.
Activations float32 (q_pos int64); caches `[n_kv, slots, row]` in a KV type of
`kv_types` (float32 rows by default): stores encode, attention decodes. Overrides must
give the reference's results up to float32 rounding (the attention kernel: its stated
bound), and fall back to the reference for cases they do not handle.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from ..quant import registry
from .kv_types import load as kv_load, store as kv_store
from .layers import ACTIVATION_FNS, attention, rms_norm, rotate


def rms_norm_add(x: np.ndarray, a: Optional[np.ndarray], weight: np.ndarray, eps: float
                 ) -> Tuple[np.ndarray, np.ndarray]:
    """Residual add then RMSNorm: `(x + a, rms_norm(x + a) * weight)`, `[T, d]` each."""
    s = x if a is None else x + a                                   # [T, d]
    return s, rms_norm(s, weight, eps)


def rope_store(q: np.ndarray, k: np.ndarray, v: np.ndarray, cos: Optional[np.ndarray],
               sin: Optional[np.ndarray], dim: int, neox: bool, k_cache: np.ndarray,
               v_cache: np.ndarray, start: int) -> np.ndarray:
    """RoPE on `q [T, H, hd]` and `k [T, n_kv, hd]`, then k and v into the caches
    `[n_kv, cap, hd]` at `start ..`; returns the rotated q."""
    if cos is not None:
        q = rotate(q, cos, sin, dim, neox)
        k = rotate(k, cos, sin, dim, neox)
    end = start + k.shape[0]
    kv_store(k_cache, k.shape[2], slice(start, end), k)   # [T, n_kv, hd] -> [n_kv, T, row]
    kv_store(v_cache, v.shape[2], slice(start, end), v)
    return q


def cached_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, n_keys: int,
                     q_pos: np.ndarray, scale: float, window: int) -> np.ndarray:
    """`layers.attention` over the first `n_keys` cached positions -> `[T, H * hd]`."""
    hd = q.shape[2]
    return attention(q, kv_load(k_cache, hd, slice(0, n_keys)),
                     kv_load(v_cache, hd, slice(0, n_keys)), q_pos, scale, window or None)


def rope_store_paged(q: np.ndarray, k: np.ndarray, v: np.ndarray, cos: Optional[np.ndarray],
                     sin: Optional[np.ndarray], dim: int, neox: bool, k_pool: np.ndarray,
                     v_pool: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """RoPE on q and k, then k and v into the pool `[n_kv, slots, hd]` at `slots [T]`."""
    if cos is not None:
        q = rotate(q, cos, sin, dim, neox)
        k = rotate(k, cos, sin, dim, neox)
    kv_store(k_pool, k.shape[2], slots, k)                # [T, n_kv, hd] -> [n_kv, T, row]
    kv_store(v_pool, v.shape[2], slots, v)
    return q


def sequence_slots(table: np.ndarray, block: int, n_keys: int) -> np.ndarray:
    """Slots of positions `0 .. n_keys-1` of a sequence whose blocks are `table`."""
    positions = np.arange(n_keys)                                   # [L]
    return table[positions // block].astype(np.int64) * block + positions % block


def attention_paged(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray,
                    tables: np.ndarray, block: int, q_pos: np.ndarray, scale: float,
                    window: int) -> np.ndarray:
    """Each run of rows with the same block table is one sequence: its keys are gathered
    from the pool and `layers.attention` runs over them -> `[T, H * hd]`."""
    t_count = q.shape[0]
    out = np.empty((t_count, q.shape[1] * q.shape[2]), np.float32)  # [T, H*hd]
    first = 0
    while first < t_count:
        last = first + 1
        while last < t_count and np.array_equal(tables[last], tables[first]):
            last += 1
        n_keys = int(q_pos[first:last].max()) + 1
        slots = sequence_slots(tables[first], block, n_keys)        # [L]
        hd = q.shape[2]
        out[first:last] = attention(q[first:last], kv_load(k_pool, hd, slots),
                                    kv_load(v_pool, hd, slots), q_pos[first:last],
                                    scale, window or None)
        first = last
    return out


def matmul_glu(gate: Any, up: Any, x: np.ndarray, act: str) -> np.ndarray:
    """Gated MLP input: `act(x W_gate^T + b) * (x W_up^T + b)` -> `[T, d_ff]`."""
    from .weights import matmul_group
    g, u = matmul_group([gate, up], x)                             # [T, d_ff] each
    return ACTIVATION_FNS[act](g) * u


def decoder_block(model: Any, block: Any, x: np.ndarray, positions: np.ndarray, cache: Any,
                  tables: Any) -> np.ndarray:
    """One decoder layer: the model's own definition (`Transformer.run_block`)."""
    return model.run_block(block, x, positions, cache, tables)


# kind -> numpy reference; THE list of fused kinds (backends override entries of it).
KINDS = {
    "rms_norm_add": rms_norm_add,
    "rms_norm": rms_norm,
    "rope_store": rope_store,
    "attention": cached_attention,
    "matmul_glu": matmul_glu,
    "decoder_block": decoder_block,
    "rope_store_paged": rope_store_paged,
    "attention_paged": attention_paged,
}

for _kind, _fn in KINDS.items():
    registry.register(_kind, "*")(_fn)


__all__ = ["KINDS", "rms_norm_add", "rope_store", "cached_attention",
           "matmul_glu", "decoder_block", "rope_store_paged", "attention_paged",
           "sequence_slots"]
