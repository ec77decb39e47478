"""numba CUDA kernels: quantized matvec/matmul for the block types of `common.BLOCKS`,
and decode-step attention over the KV cache.

One thread computes one output `y[t, r]`: it walks row r's blocks, decodes each weight to
float32 exactly as the numpy reference does (`d * q (+ m)`, K-quant `dl * q - ml`), and
accumulates its product with the float32 activation in float32. Activations stay float,
so results match the numpy backend to float32 rounding of the sum order (tested under
`NUMBA_ENABLE_CUDASIM=1`, numba's simulator, since no GPU is available here).

Weights are copied to the device once, on first use, and cached by their host address.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np
from numba import cuda, float32, float64

from .common import BLOCKS

SUPPORTED = tuple(BLOCKS)
THREADS = 64

_POW2 = np.array([2.0 ** -24] + [2.0 ** (e - 25) for e in range(1, 32)], np.float32)


@cuda.jit(device=True)
def _f16(w, o):
    h = np.int32(w[o]) | (np.int32(w[o + 1]) << 8)
    e = (h >> 10) & 31
    mant = h & 1023
    if e:
        mant |= 1024
    v = float32(mant) * float32(_POW2[e])
    return -v if h & 0x8000 else v


@cuda.jit(device=True)
def _k4(w, o, j):
    if j < 4:
        return w[o + j] & 63, w[o + j + 4] & 63
    return ((w[o + j + 4] & 15) | ((w[o + j - 4] >> 6) << 4),
            (w[o + j + 4] >> 4) | ((w[o + j] >> 6) << 4))


@cuda.jit(device=True)
def _row_dot(kind, w, o, nb, x, t):
    """Row at byte `o` (nb blocks of type `kind`) . `x[t]`, float32."""
    acc = float32(0.0)
    if kind <= 3:                                          # Q4_0 Q4_1 Q5_0 Q5_1
        size = (18, 20, 22, 24)[kind]
        has_min = kind == 1 or kind == 3
        five = kind >= 2
        for b in range(nb):
            p = o + b * size
            d = _f16(w, p)
            m = _f16(w, p + 2) if has_min else float32(0.0)
            qh_at = p + (4 if has_min else 2)
            qs = qh_at + (4 if five else 0)
            qh = 0
            if five:
                qh = (np.int32(w[qh_at]) | (np.int32(w[qh_at + 1]) << 8)
                      | (np.int32(w[qh_at + 2]) << 16) | (np.int32(w[qh_at + 3]) << 24))
            offset = 0 if has_min else (16 if five else 8)
            for j in range(16):
                lo = np.int32(w[qs + j] & 15)
                hi = np.int32(w[qs + j] >> 4)
                if five:
                    lo |= ((qh >> j) & 1) << 4
                    hi |= ((qh >> (j + 16)) & 1) << 4
                acc += (float32(lo - offset) * d + m) * x[t, b * 32 + j]
                acc += (float32(hi - offset) * d + m) * x[t, b * 32 + 16 + j]
    elif kind == 4:                                        # Q8_0
        for b in range(nb):
            p = o + b * 34
            d = _f16(w, p)
            for j in range(32):
                q = np.int32(w[p + 2 + j])
                q = q - 256 if q > 127 else q
                acc += float32(q) * d * x[t, b * 32 + j]
    elif kind == 5 or kind == 6:                           # Q4_K Q5_K
        size = 144 if kind == 5 else 176
        qs = 16 if kind == 5 else 48
        for b in range(nb):
            p = o + b * size
            d, dmin = _f16(w, p), _f16(w, p + 2)
            for j in range(8):
                sc, mn = _k4(w, p + 4, j)
                dl, ml = d * float32(sc), dmin * float32(mn)
                q_at, shift = p + qs + 32 * (j >> 1), 4 * (j & 1)
                for l in range(32):
                    q = np.int32((w[q_at + l] >> shift) & 15)
                    if kind == 6:
                        q |= np.int32((w[p + 16 + l] >> j) & 1) << 4
                    acc += (dl * float32(q) - ml) * x[t, b * 256 + 32 * j + l]
    else:                                                  # Q6_K
        for b in range(nb):
            p = o + b * 210
            d = _f16(w, p + 208)
            for g in range(16):
                h, k, half = g >> 3, (g >> 1) & 3, g & 1
                sc = np.int32(w[p + 192 + g])
                sc = sc - 256 if sc > 127 else sc
                dl = d * float32(sc)
                for l in range(16):
                    lo = (w[p + 64 * h + 32 * (k & 1) + 16 * half + l] >> (4 * (k >> 1))) & 15
                    hi = (w[p + 128 + 32 * h + 16 * half + l] >> (2 * k)) & 3
                    q = np.int32(lo | (hi << 4)) - 32
                    acc += dl * float32(q) * x[t, b * 256 + 16 * g + l]
    return acc


@cuda.jit
def _matmul_kernel(kind, w, rows, nb, row_bytes, x, y):
    """`y [T, rows]` = W `x [T, in]`; one thread per (row, token)."""
    r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t = cuda.blockIdx.y
    if r < rows:
        y[t, r] = _row_dot(kind, w, r * row_bytes, nb, x, t)


# id(host array) -> (host array, device copy); holding the host array keeps its id unique.
_device_weights: Dict[int, Tuple[np.ndarray, object]] = {}


def _on_device(data: np.ndarray):
    found = _device_weights.get(id(data))
    if found is None or found[0] is not data:
        found = _device_weights[id(data)] = (data, cuda.to_device(data))
    return found[1]


def cuda_matmul(data: np.ndarray, dtype, shape: Tuple[int, int], x: np.ndarray,
                scratch_elements: int = 0) -> np.ndarray:
    """Kernel protocol for kind "matmul": `x [T, in]` -> `[T, out]` float32 on the GPU."""
    kind, block, size = BLOCKS[dtype.name]
    out_dim, in_dim = shape
    nb = in_dim // block
    y = cuda.device_array((x.shape[0], out_dim), np.float32)
    grid = ((out_dim + THREADS - 1) // THREADS, x.shape[0])
    _matmul_kernel[grid, THREADS](kind, _on_device(data), out_dim, nb, nb * size,
                                  cuda.to_device(np.ascontiguousarray(x, np.float32)), y)
    return y.copy_to_host()


# --------------------------------------------------------------------------- attention

@cuda.jit
def _attention_kernel(q, k, v, n_keys, scale, out, scores):
    """One thread per query head h of one decode step: `q [H, hd]`, `k, v [n_kv, L, hd]`.
    Scores and softmax in float64 (as apr_core.model.layers.attention), `scores [H, L]`
    is per-head scratch."""
    h = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    n_heads, hd = q.shape
    if h >= n_heads:
        return
    kv = h // (n_heads // k.shape[0])
    best = -math.inf
    for j in range(n_keys):
        s = float64(0.0)
        for i in range(hd):
            s += float64(q[h, i]) * scale * float64(k[kv, j, i])
        scores[h, j] = s
        best = max(best, s)
    total = float64(0.0)
    for j in range(n_keys):
        scores[h, j] = math.exp(scores[h, j] - best)
        total += scores[h, j]
    for i in range(hd):
        acc = float32(0.0)
        for j in range(n_keys):
            acc += float32(scores[h, j] / total) * v[kv, j, i]
        out[h, i] = acc


def cuda_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Decode-step attention: `q [H, hd]`, `k, v [n_kv, L, hd]` -> `[H * hd]` float32
    (the query at position L - 1 sees every key, as after a decode step's cache store)."""
    n_heads, hd = q.shape
    out = cuda.device_array((n_heads, hd), np.float32)
    scores = cuda.device_array((n_heads, k.shape[1]), np.float64)
    blocks = (n_heads + THREADS - 1) // THREADS
    _attention_kernel[blocks, THREADS](
        cuda.to_device(np.ascontiguousarray(q, np.float32)),
        cuda.to_device(np.ascontiguousarray(k, np.float32)),
        cuda.to_device(np.ascontiguousarray(v, np.float32)), k.shape[1], float(scale), out,
        scores)
    return out.copy_to_host().reshape(-1)


__all__ = ["cuda_matmul", "cuda_attention", "SUPPORTED"]
