"""Per-row block kernels (numba): a weight row's dot with 16-bit activations, and a weight
row dequantized to float32, for each block type in `common.BLOCKS`.

Row functions take the weight bytes `w` (flat uint8), the row's byte offset `o` and its
block count `nb`. Activations come quantized by `common.quantize_activations`: codes
`xq [n]` int16, scales `xd [n/32]` f32 and code sums `xs [n/32]` int32 for one token.
A block's integer dot runs in `simd`; here only the per-block scale arithmetic remains:

  Q4_1/Q5_1  w = d q + m          -> xd (d isum + m xs)
  Q4_K/Q5_K  w = (d sc) q - dmin m -> xd ((d sc) isum - (dmin m) xs), per 32-element run
  others     w = d (q - offset)   -> xd d isum (the offset is taken off inside the vector)

Dequantizing rows computes every float exactly as the numpy reference does (the scale
products in float32, then one multiply and one add per element), so it is bit-exact.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import simd
from .common import f16

# Block bytes and the offsets of their fields (ggml-common.h; see apr_core.quant.kernels).
F32 = np.float32


@njit(inline="always", cache=True)
def k4_scale_min(w, o, j):
    """6-bit scale and min of sub-block `j` from the 12 scale bytes at `w[o:o+12]`."""
    if j < 4:
        return w[o + j] & 63, w[o + j + 4] & 63
    sc = (w[o + j + 4] & 15) | ((w[o + j - 4] >> 6) << 4)
    mn = (w[o + j + 4] >> 4) | ((w[o + j] >> 6) << 4)
    return sc, mn


# --------------------------------------------------------------------------- dots

@njit(cache=True)
def dot_row(kind, w, o, nb, xq, xd, xs):
    """One weight row (block type `kind`) . one token's quantized activations -> float."""
    acc = 0.0
    if kind == 0:                                              # Q4_0, 18 B
        for b in range(nb):
            p = o + b * 18
            acc += xd[b] * f16(w, p) * F32(simd.dot_q4_0(w, p + 2, xq, b * 32))
    elif kind == 1:                                            # Q4_1, 20 B
        for b in range(nb):
            p = o + b * 20
            isum = simd.dot_q4_1(w, p + 4, xq, b * 32)
            acc += xd[b] * (f16(w, p) * F32(isum) + f16(w, p + 2) * F32(xs[b]))
    elif kind == 2:                                            # Q5_0, 22 B
        for b in range(nb):
            p = o + b * 22
            acc += xd[b] * f16(w, p) * F32(simd.dot_q5_0(w, p + 6, p + 2, xq, b * 32))
    elif kind == 3:                                            # Q5_1, 24 B
        for b in range(nb):
            p = o + b * 24
            isum = simd.dot_q5_1(w, p + 8, p + 4, xq, b * 32)
            acc += xd[b] * (f16(w, p) * F32(isum) + f16(w, p + 2) * F32(xs[b]))
    elif kind == 4:                                            # Q8_0, 34 B
        for b in range(nb):
            p = o + b * 34
            acc += xd[b] * f16(w, p) * F32(simd.dot_q8_0(w, p + 2, xq, b * 32))
    elif kind == 5 or kind == 6:                               # Q4_K 144 B, Q5_K 176 B
        size = 144 if kind == 5 else 176
        qs = 16 if kind == 5 else 48
        for b in range(nb):
            p = o + b * size
            d, dmin = f16(w, p), f16(w, p + 2)
            for j in range(8):                                 # 32-element sub-blocks
                sc, mn = k4_scale_min(w, p + 4, j)
                q_at, shift = p + qs + 32 * (j >> 1), 4 * (j & 1)
                xb = b * 8 + j
                if kind == 5:
                    isum = simd.dot_q4_k(w, q_at, shift, xq, xb * 32)
                else:
                    isum = simd.dot_q5_k(w, q_at, shift, p + 16, j, xq, xb * 32)
                acc += xd[xb] * ((d * F32(sc)) * F32(isum) - (dmin * F32(mn)) * F32(xs[xb]))
    elif kind == 7:                                            # Q6_K, 210 B
        for b in range(nb):
            p = o + b * 210
            d = f16(w, p + 208)
            for g in range(16):                                # 16-element groups
                h, k, half = g >> 3, (g >> 1) & 3, g & 1
                ql = p + 64 * h + 32 * (k & 1) + 16 * half
                qh = p + 128 + 32 * h + 16 * half
                e = b * 256 + 16 * g
                isum = simd.dot_q6_k(w, ql, 4 * (k >> 1), qh, 2 * k, xq, e)
                sc = np.int8(w[p + 192 + g])
                acc += xd[e >> 5] * (d * F32(sc)) * F32(isum)
    return F32(acc)


# --------------------------------------------------------------------------- dequantize

@njit(cache=True)
def dequantize_row(kind, w, o, nb, out):
    """One weight row -> `out [nb * block]` float32, bit-exact to the numpy reference.

    Types without a min add -0.0, the float32 identity (x + -0.0 == x, signed zeros
    included), so `d * q` keeps the sign of zero numpy gives it."""
    zero = F32(-0.0)
    if kind == 0:
        for b in range(nb):
            p = o + b * 18
            simd.deq_q4_0(w, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 1:
        for b in range(nb):
            p = o + b * 20
            simd.deq_q4_1(w, p + 4, f16(w, p), f16(w, p + 2), out, b * 32)
    elif kind == 2:
        for b in range(nb):
            p = o + b * 22
            simd.deq_q5_0(w, p + 6, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 3:
        for b in range(nb):
            p = o + b * 24
            simd.deq_q5_1(w, p + 8, p + 4, f16(w, p), f16(w, p + 2), out, b * 32)
    elif kind == 4:
        for b in range(nb):
            p = o + b * 34
            simd.deq_q8_0(w, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 5 or kind == 6:
        size = 144 if kind == 5 else 176
        qs = 16 if kind == 5 else 48
        for b in range(nb):
            p = o + b * size
            d, dmin = f16(w, p), f16(w, p + 2)
            for j in range(8):
                sc, mn = k4_scale_min(w, p + 4, j)
                q_at, shift = p + qs + 32 * (j >> 1), 4 * (j & 1)
                dl, ml = d * F32(sc), dmin * F32(mn)
                if kind == 5:
                    simd.deq_q4_k(w, q_at, shift, dl, -ml, out, b * 256 + 32 * j)
                else:
                    simd.deq_q5_k(w, q_at, shift, p + 16, j, dl, -ml, out, b * 256 + 32 * j)
    elif kind == 7:
        for b in range(nb):
            p = o + b * 210
            d = f16(w, p + 208)
            for g in range(16):
                h, k, half = g >> 3, (g >> 1) & 3, g & 1
                ql = p + 64 * h + 32 * (k & 1) + 16 * half
                qh = p + 128 + 32 * h + 16 * half
                dl = d * F32(np.int8(w[p + 192 + g]))
                simd.deq_q6_k(w, ql, 4 * (k >> 1), qh, 2 * k, dl, zero, out, b * 256 + 16 * g)
