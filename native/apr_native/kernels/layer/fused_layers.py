"""numba CPU versions of the fused per-layer kinds of `apr_core.model.fused` (signatures
and meaning there): residual add + RMSNorm, RoPE of q and k + KV-cache store, attention
over the cache, and the gated-MLP input (gate/up matvec + SiLU) in one call each.

Each replaces several small numpy calls (and their temporaries) by one compiled loop, and
falls back to the numpy reference for inputs it does not handle (other activations,
biases, dense or unsupported weights, non-float32 arrays).

Accuracy against the numpy reference:
- rms_norm_add: the mean of squares is summed in float64 (numpy: float32 pairwise), the
  rest is the reference's float32 operations in its order: ~1 ulp of the result.
- rope_store: the reference's float32 products and sums in its order, stored in the
  cache's KV type as apr_core.model.kv_types encodes it: exact.
- attention: the blocked kernel of `paged_attention` (float32 scores and online softmax;
  its bound against the reference's float64 scores is in that module).
- matmul_glu: the matvec's bound (cpu.py) through SiLU, whose float32 exp differs from
  numpy's by ~1 ulp.
- rms_norm (alone: Q/K norms per head, sandwich norms): the numpy reference itself; these
  are a few thousand values per token, where a compiled loop gains nothing, and the
  one-call layer (decoder_block) leaves models with them to the kinds, so they stay exact.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
from numba import njit

from apr_core.model import fused

from .. import cpu, pool
from ..attention.paged_attention import (call_lanes, contiguous_tables, describe, merge_parts,
                                         plan, run_items)
from ..attention.kv_rows import KV_Q4_0, KV_Q8_0, QK, as_bytes, encode_row, kind_code, rotate_rows
from ..vector.fastexp import silu_mul_inplace

F32 = np.float32

# Attention work (query heads x queries x keys) above which its items are split between
# the `pool` threads: a task costs ~2 us, 9 heads over 100 keys ~10 us.
ATTN_POOL_WORK = 1 << 10
# head_dim the blocked kernel handles (16-lane rows); others run the numpy reference.
ATTN_LANES = 16


@njit(cache=True)
def rms_rows(x, a, weight, eps, s, h):
    """`s = x + a` (when `a` has rows), `h = s * (1 / sqrt(mean(s^2) + eps)) * weight`."""
    t_count, d = x.shape
    add = a.shape[0] > 0
    for t in range(t_count):
        total = 0.0
        for i in range(d):
            v = x[t, i] + a[t, i] if add else x[t, i]
            s[t, i] = v
            total += float(v) * float(v)
        r = F32(1.0) / np.sqrt(F32(total / d) + eps)
        for i in range(d):
            h[t, i] = (s[t, i] * r) * weight[i]


NO_ROWS = np.zeros((0, 0), np.float32)


def rms_norm_add(x: np.ndarray, a: Optional[np.ndarray], weight: np.ndarray, eps: float
                 ) -> Tuple[np.ndarray, np.ndarray]:
    """Kind "rms_norm_add" (apr_core.model.fused)."""
    if x.dtype != np.float32 or (a is not None and a.dtype != np.float32):
        return fused.rms_norm_add(x, a, weight, eps)
    x = np.ascontiguousarray(x)
    s = np.empty_like(x) if a is not None else x                    # [T, d]
    h = np.empty_like(x)                                            # [T, d]
    rms_rows(x, NO_ROWS if a is None else np.ascontiguousarray(a), weight, F32(eps), s, h)
    return s, h


@njit(cache=True)
def rotate_into(x, cos, sin, dim, neox, t, head, out):
    """`out[:]` = head `x[t, head]` with its first `dim` features rotated."""
    half = dim // 2
    hd = x.shape[2]
    for i in range(half):
        c, s = cos[t, i], sin[t, i]
        if neox:
            a, b = x[t, head, i], x[t, head, i + half]
            out[i] = a * c - b * s
            out[i + half] = b * c + a * s
        else:
            a, b = x[t, head, 2 * i], x[t, head, 2 * i + 1]
            out[2 * i] = a * c - b * s
            out[2 * i + 1] = a * s + b * c
    for i in range(dim, hd):
        out[i] = x[t, head, i]


@njit(cache=True)
def rope_rows(q, k, v, cos, sin, dim, neox, kind, k_bytes, v_bytes, slots, q_out):
    """`q_out [T, H, hd]` = q rotated; k rotated and v stored as KV type `kind` into the
    caches (bytes `[n_kv, slots, row]`, `kv_rows`) at slot `slots[t]` for token t."""
    row = np.empty(q.shape[2], np.float32)                          # [hd]
    for t in range(q.shape[0]):
        for head in range(q.shape[1]):
            rotate_into(q, cos, sin, dim, neox, t, head, q_out[t, head])
        for head in range(k.shape[1]):
            rotate_into(k, cos, sin, dim, neox, t, head, row)
            encode_row(kind, row, k_bytes[head, slots[t]], 0)
            encode_row(kind, v[t, head], v_bytes[head, slots[t]], 0)


def kernel_caches(k_cache: np.ndarray, v_cache: np.ndarray, head_dim: int):
    """(kind code, k bytes, v bytes) of caches the numba kernels handle, else None
    (a layout or head size they do not: the numpy reference runs)."""
    if not (k_cache.flags.c_contiguous and v_cache.flags.c_contiguous) or \
            head_dim % ATTN_LANES or k_cache.dtype != v_cache.dtype:
        return None
    try:
        kind = kind_code(k_cache, head_dim)
    except Exception:   # not a KV cache array of a known type
        return None
    return kind, as_bytes(k_cache), as_bytes(v_cache)


def _rope_slots(q, k, v, cos, sin, dim, neox, k_cache, v_cache, slots, fallback):
    """`rope_rows` when the activations are float32 and the caches a known KV type, else
    `fallback()` (the numpy reference)."""
    arrays = (q, k, v) + (() if cos is None else (cos, sin))
    caches = kernel_caches(k_cache, v_cache, q.shape[2])
    if any(a.dtype != np.float32 for a in arrays) or caches is None:
        return fallback()
    if cos is None:
        cos = sin = NO_ROWS
        dim = 0
    q_out = np.empty(q.shape, np.float32)                           # [T, H, hd]
    rope_rows(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v),
              np.ascontiguousarray(cos), np.ascontiguousarray(sin), dim, neox, *caches,
              np.ascontiguousarray(slots, np.int64), q_out)
    return q_out


def rope_store(q: np.ndarray, k: np.ndarray, v: np.ndarray, cos: Optional[np.ndarray],
               sin: Optional[np.ndarray], dim: int, neox: bool, k_cache: np.ndarray,
               v_cache: np.ndarray, start: int) -> np.ndarray:
    """Kind "rope_store" (apr_core.model.fused)."""
    slots = np.arange(start, start + q.shape[0], dtype=np.int64)    # [T]
    return _rope_slots(q, k, v, cos, sin, dim, neox, k_cache, v_cache, slots,
                       lambda: fused.rope_store(q, k, v, cos, sin, dim, neox, k_cache,
                                                v_cache, start))


def rope_store_paged(q: np.ndarray, k: np.ndarray, v: np.ndarray, cos: Optional[np.ndarray],
                     sin: Optional[np.ndarray], dim: int, neox: bool, k_pool: np.ndarray,
                     v_pool: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Kind "rope_store_paged" (apr_core.model.fused)."""
    return _rope_slots(q, k, v, cos, sin, dim, neox, k_pool, v_pool, slots,
                       lambda: fused.rope_store_paged(q, k, v, cos, sin, dim, neox, k_pool,
                                                      v_pool, slots))


@njit(cache=True)
def attention_into(ctl, task, fargs, q, k_bytes, v_bytes, kind, n_keys, tables, block,
                   q_pos, scale, window, out, chunks):
    """`out [T, H, hd]` = attention of `q [T, H, hd]` over the caches (bytes of KV type
    `kind`; row t's blocks `tables[t]`, `block` slots each): the items of
    `paged_attention.plan` as a `pool` task of up to `chunks` chunks, or on the calling
    thread when `chunks` is 0 (`attention_chunks`)."""
    rotated = kind == KV_Q8_0 or kind == KV_Q4_0   # rows hold H x (`kv_rows`): so do q, out
    if rotated:
        q = q.copy()                                        # [T, H, hd], C order
        rotate_rows(q, np.float32(1.0 / QK))               # (H q / 32) . (H k) = q . k
    group = q.shape[1] // k_bytes.shape[0]
    items, n_parts = plan(q_pos, tables, k_bytes.shape[0], n_keys, window, chunks // 2)
    mp = call_lanes(items, group)
    parts = np.empty((n_parts, (q.shape[2] + 2) * mp), np.float32)
    if chunks > 0 and items.shape[0] > 1:
        desc = describe(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window,
                        items, parts, mp)
        pool.attention(ctl, task, fargs, desc, scale, chunks, items, parts, q, k_bytes,
                       v_bytes, out)
    else:
        run_items(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window,
                  np.float32(scale), items, parts, mp, 0, items.shape[0])
    if n_parts:
        merge_parts(items, parts, out, group, mp)
    if rotated:
        rotate_rows(out, np.float32(1.0 / QK))             # sum p H v = H (sum p v)


def attention_chunks(workers: pool.Pool, queries: int, n_keys: int) -> int:
    """Chunks of the attention task for `queries` (token, head) rows over `n_keys` keys,
    0 to run it on the calling thread (little work)."""
    return workers.most_chunks() if queries * n_keys > ATTN_POOL_WORK else 0


def _attention_tables(q, k_cache, v_cache, n_keys, tables, block, q_pos, scale, window,
                      fallback):
    """`attention_into` on the pool's threads -> `[T, H * hd]`, or `fallback()` for
    inputs the kernel does not handle."""
    t, n_heads, hd = q.shape
    caches = kernel_caches(k_cache, v_cache, hd)
    if q.dtype != np.float32 or caches is None:
        return fallback()
    out = np.empty((t, n_heads, hd), np.float32)                    # [T, H, hd]
    workers = pool.get()
    attention_into(*workers.shared, np.ascontiguousarray(q), caches[1], caches[2], caches[0],
                   int(n_keys), np.ascontiguousarray(tables, np.int32), int(block),
                   np.ascontiguousarray(q_pos, np.int64), float(scale), int(window or 0),
                   out, attention_chunks(workers, t * n_heads, n_keys))
    return out.reshape(t, n_heads * hd)


def attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, n_keys: int,
              q_pos: np.ndarray, scale: float, window: int) -> np.ndarray:
    """Kind "attention" (apr_core.model.fused): the contiguous cache is one block."""
    return _attention_tables(q, k_cache, v_cache, n_keys, contiguous_tables(q.shape[0]),
                             k_cache.shape[1], q_pos, scale, window,
                             lambda: fused.cached_attention(q, k_cache, v_cache, n_keys,
                                                            q_pos, scale, window))


def attention_paged(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray,
                    tables: np.ndarray, block: int, q_pos: np.ndarray, scale: float,
                    window: int) -> np.ndarray:
    """Kind "attention_paged" (apr_core.model.fused)."""
    n_keys = int(np.max(q_pos)) + 1
    return _attention_tables(q, k_pool, v_pool, n_keys, tables, block, q_pos, scale, window,
                             lambda: fused.attention_paged(q, k_pool, v_pool, tables, block,
                                                           q_pos, scale, window))


def matmul_glu(gate: Any, up: Any, x: np.ndarray, act: str) -> np.ndarray:
    """Kind "matmul_glu" (apr_core.model.fused): SiLU only; one `pool` task for the gate
    and up matvecs and the activation when both stay quantized in memory and have the
    same shape."""
    if act != "silu":
        return fused.matmul_glu(gate, up, x, act)
    x = np.ascontiguousarray(x, np.float32)
    t = x.shape[0]
    weights = cpu.weight_table((gate, up)) if t <= cpu.DOT_MAX_TOKENS and \
        gate.shape == up.shape and gate.bias is None and up.bias is None else None
    if weights is not None:
        rows = gate.shape[0]
        yg = np.empty((t, rows), np.float32)                        # [T, d_ff]
        yu = np.empty((t, rows), np.float32)
        out = np.empty((t, rows), np.float32)
        workers = pool.get()
        pool.glu(*workers.shared, weights.table, x, yg, yu, out,
                 workers.chunks(weights.nbytes))
        return out
    g, u = gate.matmul(x), up.matmul(x)                             # [T, d_ff] each
    silu_mul_inplace(g, u)      # a new [T, d_ff] output costs first-touch page faults
    return g


# kind -> numba version (registered by apr_native.backends for backend "numba").
KERNELS = {
    "rms_norm_add": rms_norm_add,
    "rms_norm": fused.KINDS["rms_norm"],
    "rope_store": rope_store,
    "attention": attention,
    "matmul_glu": matmul_glu,
    "rope_store_paged": rope_store_paged,
    "attention_paged": attention_paged,
}

__all__ = ["KERNELS", "rms_norm_add", "rope_store", "attention", "matmul_glu",
           "rope_store_paged", "attention_paged",
           "ATTN_POOL_WORK", "rms_rows", "rope_rows", "attention_into", "attention_chunks",
           "kernel_caches", "NO_ROWS"]
