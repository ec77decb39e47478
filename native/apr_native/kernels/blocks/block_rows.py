"""Per-row block kernels (numba): a weight row's dot with 16-bit activations, and a weight
row dequantized to float32, for each block type in `block_table.BLOCKS`.

Row functions take the weight bytes `w` (flat uint8), the row's byte offset `o` and its
block count `nb`. Activations come quantized by `block_table.quantize_activations`: codes
`xq [T, n]` int16, scales `xd [T, n/32]` f32 and run sums `xs [T, n/32]` f32 (scale times
code sum); or int8 codes (`quantize_x8`), one scale per 256 elements where they meet
Q4_K/Q6_K rows, whose byte dots (`kquant_bytes`) read `xd` once per block.
A block's integer dot runs in `block_ir` (K-quant blocks' scales are decoded as vectors by
`kquant_scales`); here only the per-block scale arithmetic remains:

  Q4_1/Q5_1  w = d q + m          -> xd d isum + m xs
  Q4_K/Q5_K  w = (d sc) q - dmin m -> xd (d sc) isum - (dmin m) xs, per 32-element run
  others     w = d (q - offset)   -> xd d isum (the offset is taken off inside the vector)

Dequantizing rows computes every float exactly as the numpy reference does (the scale
products in float32, then one multiply and one add per element), so it is bit-exact.
Many tokens (prefill) take rows dequantized four at a time (`rows_times_tokens`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..vector import block_ir, kquant_bytes, kquant_scales
from .block_table import Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, f16

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

@njit(inline="always", cache=True)
def _k4_block(kind, w, ro, b, xq, xd, xs, t, xo, sc, acc, mins8):
    """Block `b` of a Q4_K/Q5_K row at byte `ro`: its eight scales and mins decoded as
    vectors (`kquant_scales.k4_scales8`, scales into `sc [8]`, the min terms added to
    `mins8`), then its eight 32-element runs: sub-blocks 2i and 2i + 1 share 32 code
    bytes (low, high nibbles)."""
    p = ro + b * (Q4_K_BYTES if kind == 5 else Q5_K_BYTES)
    q_at = p + (16 if kind == 5 else 48)
    d, dmin = block_ir.load_f16x2(w, p)
    mins8 = block_ir.add8(mins8, kquant_scales.k4_scales8(w, p + 4, d, dmin, xd, xs,
                                                          t * xd.shape[1] + b * 8, sc))
    xb = xo + b * 256
    for i in range(4):
        for half in range(2):
            j = 2 * i + half
            if kind == 5:
                acc = block_ir.acc_q4_k(w, q_at + 32 * i, 4 * half, xq, xb + 32 * j, sc[j], acc)
            else:
                acc = block_ir.acc_q5_k(w, q_at + 32 * i, 4 * half, p + 16, j, xq, xb + 32 * j,
                                        sc[j], acc)
    return acc, mins8


@njit(inline="always", cache=True)
def _q6_run(w, ro, b, h, k, xq, t, xo, sc, acc):
    """Elements 128 h + 32 k .. +32 of Q6_K block `b` (row at byte `ro`): two groups of
    16 with their own scales (`sc [16]`, from `kquant_scales.q6_scales16`); `h`, `k`
    are constants after inlining."""
    p = ro + b * Q6_K_BYTES
    ql = p + 64 * h + 32 * (k & 1)
    qh = p + 128 + 32 * h
    g = 8 * h + 2 * k
    e = b * 256 + 128 * h + 32 * k
    return block_ir.acc_q6_k_run(w, ql, 4 * (k >> 1), qh, 2 * k, xq, xo + e, sc[g], sc[g + 1],
                                 acc)


# How far ahead of the block it reads the int8 K-quant dots ask for weight bytes. The
# hardware prefetcher alone kept one thread's Q4_K dots at 7-7.7 GB/s out of DRAM (9-11
# GB/s is this host's one-thread read rate); 1 KiB ahead 8.7-9.8, 2 KiB 8.6-11, 4 KiB
# 7.9-10.3 (Q6_K: 6.1-7.2 -> 8.4-10.4 at 2 KiB; `dot_rows` on 230 MB of rows, load 4-9).
PREFETCH_BYTES = 2048


@njit(inline="always", cache=True)
def _prefetch(w, p, size):
    """Prefetch hints for the `size` bytes of a block `PREFETCH_BYTES` past `p`, a line
    (64 bytes) at a time."""
    for k in range(0, size, 64):
        block_ir.prefetch(w, p + PREFETCH_BYTES + k)


@njit(cache=True)
def dot_rows(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, y, col):
    """Rows `r0..r1-1` of a weight (block type `kind`, bytes from `o`) . every token's
    quantized activations: `y[t, col + r - r0]` for `xq [T, in]`, `xd, xs [T, in/32]`.

    Each block adds `xd d` times its integer products to one 8-lane vector (`block_ir.acc_*`)
    and its min term to a scalar; the vector is summed once per row. The loops over rows
    sit inside each type's branch: a call per row cost ~50 ns, a third of a 576-wide Q4_1
    row. Activations are addressed by flat offsets (`xo` + element) into the 2-D arrays,
    never sliced: a slice per row is a reference-count increment and decrement, atomic
    operations on a line both threads share."""
    n_in = xq.shape[1]
    sc = np.empty(16, np.float32)                  # a K-quant block's run/group scales
    for t in range(xq.shape[0]):
        xo = t * n_in
        for r in range(r0, r1):
            c = col + r - r0
            ro = o + r * row_bytes
            acc = block_ir.zero8()
            mins = F32(0.0)
            if kind == 0:                                      # Q4_0, 18 B
                for b in range(nb):
                    p = ro + b * 18
                    d = block_ir.load_f16x2(w, p)[0]
                    acc = block_ir.acc_q4_0(w, p + 2, xq, xo + b * 32, xd[t, b] * d, acc)
            elif kind == 1:                                    # Q4_1, 20 B
                for b in range(nb):
                    p = ro + b * 20
                    d, m = block_ir.load_f16x2(w, p)
                    sd = xd[t, b]
                    acc = block_ir.acc_q4_1(w, p + 4, xq, xo + b * 32, sd * d, acc)
                    mins += m * xs[t, b]
            elif kind == 2:                                    # Q5_0, 22 B
                for b in range(nb):
                    p = ro + b * 22
                    d = block_ir.load_f16x2(w, p)[0]
                    acc = block_ir.acc_q5_0(w, p + 6, p + 2, xq, xo + b * 32, xd[t, b] * d, acc)
            elif kind == 3:                                    # Q5_1, 24 B
                for b in range(nb):
                    p = ro + b * 24
                    d, m = block_ir.load_f16x2(w, p)
                    sd = xd[t, b]
                    acc = block_ir.acc_q5_1(w, p + 8, p + 4, xq, xo + b * 32, sd * d, acc)
                    mins += m * xs[t, b]
            elif kind == 4:                                    # Q8_0, 34 B
                for b in range(nb):
                    p = ro + b * 34
                    d = block_ir.load_f16x2(w, p)[0]
                    acc = block_ir.acc_q8_0(w, p + 2, xq, xo + b * 32, xd[t, b] * d, acc)
            elif kind == 5 and block_ir.byte_codes(xq):        # Q4_K . int8 (KRUN scales)
                mins8 = block_ir.zero8()
                for b in range(nb):
                    p = ro + b * Q4_K_BYTES
                    _prefetch(w, p, Q4_K_BYTES)
                    d, dmin = block_ir.load_f16x2(w, p)
                    mins8 = block_ir.add8(mins8, kquant_scales.k4_mins8(
                        w, p + 4, dmin, xs, t * xd.shape[1] + b * 8))
                    acc = kquant_bytes.acc_q4_k_block(w, p, xq, xo + b * 256, d * xd[t, b * 8],
                                                      acc)
                mins = -block_ir.hsum8(mins8)
            elif kind == 5 or kind == 6:                       # Q4_K 144 B, Q5_K 176 B
                mins8 = block_ir.zero8()
                for b in range(nb):
                    acc, mins8 = _k4_block(kind, w, ro, b, xq, xd, xs, t, xo, sc, acc, mins8)
                mins = -block_ir.hsum8(mins8)
            elif block_ir.byte_codes(xq):                      # Q6_K . int8 (KRUN scales)
                for b in range(nb):
                    p = ro + b * Q6_K_BYTES
                    _prefetch(w, p, Q6_K_BYTES)
                    d = block_ir.load_f16x2(w, p + 206)[1]
                    acc = kquant_bytes.acc_q6_k_block(w, p, xq, xo + b * 256, d * xd[t, b * 8],
                                                      acc)
            else:                                              # Q6_K, 210 B
                for b in range(nb):
                    p = ro + b * Q6_K_BYTES
                    d = block_ir.load_f16x2(w, p + 206)[1]                 # scales[14:16], d
                    kquant_scales.q6_scales16(w, p + 192, d, xd, t * xd.shape[1] + b * 8, sc)
                    # 32-element runs (h, k), two 16-element scale groups each
                    acc = _q6_run(w, ro, b, 0, 0, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 0, 1, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 0, 2, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 0, 3, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 1, 0, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 1, 1, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 1, 2, xq, t, xo, sc, acc)
                    acc = _q6_run(w, ro, b, 1, 3, xq, t, xo, sc, acc)
            y[t, c] = block_ir.hsum8(acc) + mins


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
            block_ir.deq_q4_0(w, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 1:
        for b in range(nb):
            p = o + b * 20
            block_ir.deq_q4_1(w, p + 4, f16(w, p), f16(w, p + 2), out, b * 32)
    elif kind == 2:
        for b in range(nb):
            p = o + b * 22
            block_ir.deq_q5_0(w, p + 6, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 3:
        for b in range(nb):
            p = o + b * 24
            block_ir.deq_q5_1(w, p + 8, p + 4, f16(w, p), f16(w, p + 2), out, b * 32)
    elif kind == 4:
        for b in range(nb):
            p = o + b * 34
            block_ir.deq_q8_0(w, p + 2, f16(w, p), zero, out, b * 32)
    elif kind == 5 or kind == 6:
        size = Q4_K_BYTES if kind == 5 else Q5_K_BYTES
        qs = 16 if kind == 5 else 48
        for b in range(nb):
            p = o + b * size
            d, dmin = f16(w, p), f16(w, p + 2)
            for j in range(8):
                sc, mn = k4_scale_min(w, p + 4, j)
                q_at, shift = p + qs + 32 * (j >> 1), 4 * (j & 1)
                dl, ml = d * F32(sc), dmin * F32(mn)
                if kind == 5:
                    block_ir.deq_q4_k(w, q_at, shift, dl, -ml, out, b * 256 + 32 * j)
                else:
                    block_ir.deq_q5_k(w, q_at, shift, p + 16, j, dl, -ml, out, b * 256 + 32 * j)
    elif kind == 7:
        for b in range(nb):
            p = o + b * Q6_K_BYTES
            d = f16(w, p + 208)
            for g in range(16):
                h, k, half = g >> 3, (g >> 1) & 3, g & 1
                ql = p + 64 * h + 32 * (k & 1) + 16 * half
                qh = p + 128 + 32 * h + 16 * half
                dl = d * F32(np.int8(w[p + 192 + g]))
                block_ir.deq_q6_k(w, ql, 4 * (k >> 1), qh, 2 * k, dl, zero, out, b * 256 + 16 * g)


# --------------------------------------------------------------------------- many tokens

@njit(inline="always", cache=True)
def _add4(acc, t, a0, a1, a2, a3):
    """`acc[t, :4]` += four row sums."""
    acc[t, 0] += a0
    acc[t, 1] += a1
    acc[t, 2] += a2
    acc[t, 3] += a3


@njit(inline="always", cache=True)
def _store4(y, t, c, m, a0, a1, a2, a3):
    """`y[t, c:c + m]` = the first `m` of four row sums."""
    y[t, c] = a0
    if m > 1:
        y[t, c + 1] = a1
    if m > 2:
        y[t, c + 2] = a2
    if m > 3:
        y[t, c + 3] = a3


# Columns of the input per pass of `rows_times_tokens`: four tile rows and two token rows
# of this width (24 KiB) stay in a 32 KiB L1 while all their products are summed
# (Qwen2.5's down projection, 4864 wide, ran at 95 GFLOP/s unblocked, 2 threads).
K_CHUNK = 1024


@njit(fastmath=True, cache=True)
def rows_times_tokens(kind, w, o, r0, r1, nb, row_bytes, x, y, col, tile):
    """Rows `r0..r1-1` of a weight (block type `kind`, bytes from `o`) . `x [T, in]` into
    `y[:, col:col + r1 - r0]`, `tile [4, in]` scratch. Four rows are dequantized at a
    time into the tile (bit-exact) and dotted with two tokens at a time: eight vector
    accumulators, each load of a row or a token feeding two or four FMAs (fastmath lets
    LLVM vectorize the sums, so their order differs from BLAS's: ~1e-6 relative). Wide
    inputs are summed in passes of `K_CHUNK` columns so the tile and tokens stay in L1.

    A last group of fewer than four rows runs the same loop over zero-padded tile rows:
    every row's sum is computed the same way wherever a chunk of rows starts, so the
    result does not depend on how rows were split between threads."""
    n, tokens = x.shape[1], x.shape[0]
    acc = np.empty((tokens, 4), np.float32)                        # [T, 4] running sums
    r = r0
    while r < r1:
        m = min(4, r1 - r)
        c = col + r - r0
        for j in range(4):
            if j < m:
                dequantize_row(kind, w, o + (r + j) * row_bytes, nb, tile[j])
            else:
                tile[j, :] = 0.0
        acc[:, :] = 0.0
        for k0 in range(0, n, K_CHUNK):
            k1 = min(n, k0 + K_CHUNK)
            # slices indexed from 0: an index numba can prove non-negative vectorizes
            # (range(k0, k1) left a wraparound test in the loop, 10x slower)
            w0s, w1s, w2s, w3s = tile[0, k0:k1], tile[1, k0:k1], tile[2, k0:k1], tile[3, k0:k1]
            t = 0
            while t < tokens:
                # A last odd token runs paired with itself (its twin's sums dropped), so
                # every token's sums come from the same vectorized loop: a row's result
                # does not depend on where its token sits in the batch (a prefix-cache hit
                # computes the same numbers as the whole prompt in one pass).
                pair = t + 1 < tokens
                xas, xbs = x[t, k0:k1], x[t + 1 if pair else t, k0:k1]
                a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
                for i in range(k1 - k0):
                    xa, xb = xas[i], xbs[i]
                    w0, w1, w2, w3 = w0s[i], w1s[i], w2s[i], w3s[i]
                    a0 += w0 * xa
                    a1 += w1 * xa
                    a2 += w2 * xa
                    a3 += w3 * xa
                    b0 += w0 * xb
                    b1 += w1 * xb
                    b2 += w2 * xb
                    b3 += w3 * xb
                _add4(acc, t, a0, a1, a2, a3)
                if pair:
                    _add4(acc, t + 1, b0, b1, b2, b3)
                t += 2
        for t in range(tokens):
            _store4(y, t, c, m, acc[t, 0], acc[t, 1], acc[t, 2], acc[t, 3])
        r += m
