"""The inner loops of the blocked attention kernel (`paged_attention`): the two small matrix
products of a (query tile, key block) pair and the online-softmax step between them.

Layout ("query vectors on lanes"): a tile's M query vectors (every query head of one
GQA group for each of its rows) are the columns of its float32 scratch matrices, padded
to MP columns (a multiple of 16 lanes; of 32 when the two-vector kernels run):
    Qt [hd, MP]   the tile's queries, transposed and pre-scaled
    S  [KB, MP]   scores of the key block, then their probabilities
    Ot [hd, MP]   the unnormalized output, rescaled as the running max grows
    Kb, Vb [KB, hd]  the key block's keys and values decoded to float32
so every vector operation runs along M and each K or V element is one broadcast
(`lanes16`): a score tile is KB x hd broadcasts of keys times Qt rows, the output update
hd x KB broadcasts of values times S rows. The register tiles are 4 keys (or 4 output
features) x 2 vectors: 8 accumulators, enough independent FMAs to cover their latency.

Packed lanes (MP == 16: a decode row of a GQA group, `paged_attention.packing`): with at
most 8 (4) query vectors, r = 2 (4) features of a vector sit side by side, lane
(m, x) = m r + x holding feature c r + x of vector m in row c:
    Qt [hd / r, 16], S [KB, 16], Ot [hd / r, 16]
Each K or V load is r consecutive features repeated over the lanes (`vbcast2/4`, one
broadcast load), and a score's r lanes are summed at the end (`vswap1/2`), so each lane
of vector m holds its score and S holds each probability r times, as the output update
needs. A decode row of Qwen2.5 (7 query heads per KV head) filled 7 of 16 lanes, SmolLM2
(3) 3 of 16; packed, 14 and 12 (r = 1 is the unpacked layout). The tiles are 8 keys (8
rows of Ot) x 1 vector.

Softmax per column m (FlashAttention's online form): the block's new max M' =
max(M, max_b S[b, m]); the old sum and Ot column are multiplied by e^(M - M'); p =
e^(S - M') is added to the sum. exp is `lanes16.vexp0` (fastexp's expf on 16 lanes, <= 1 ulp); an
argument below its clamp (-87) gives exactly 0, so masked keys (-inf) and empty columns
contribute nothing.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..vector.lanes16 import (vadd, vbcast2, vbcast4, vexp0, vfma, vload, vmax, vmul, vsplat,
                              vstore, vsub, vswap1, vswap2, vzero)

F32 = np.float32
NEG_INF = F32(-np.inf)


@njit(cache=True)
def scores_2v(qt, kb, s, mp, hd, nb):
    """`s[b, m] = sum_i kb[b, i] qt[i, m]` for b < nb rounded up to 4, MP % 32 == 0."""
    for b0 in range(0, nb, 4):
        k0, k1, k2, k3 = b0 * hd, (b0 + 1) * hd, (b0 + 2) * hd, (b0 + 3) * hd
        for m0 in range(0, mp, 32):
            a00, a01, a10, a11 = vzero(), vzero(), vzero(), vzero()
            a20, a21, a30, a31 = vzero(), vzero(), vzero(), vzero()
            for i in range(hd):
                q0 = vload(qt, i * mp + m0)
                q1 = vload(qt, i * mp + m0 + 16)
                x = vsplat(kb[k0 + i])
                a00 = vfma(x, q0, a00)
                a01 = vfma(x, q1, a01)
                x = vsplat(kb[k1 + i])
                a10 = vfma(x, q0, a10)
                a11 = vfma(x, q1, a11)
                x = vsplat(kb[k2 + i])
                a20 = vfma(x, q0, a20)
                a21 = vfma(x, q1, a21)
                x = vsplat(kb[k3 + i])
                a30 = vfma(x, q0, a30)
                a31 = vfma(x, q1, a31)
            o = b0 * mp + m0
            vstore(s, o, a00)
            vstore(s, o + 16, a01)
            vstore(s, o + mp, a10)
            vstore(s, o + mp + 16, a11)
            vstore(s, o + 2 * mp, a20)
            vstore(s, o + 2 * mp + 16, a21)
            vstore(s, o + 3 * mp, a30)
            vstore(s, o + 3 * mp + 16, a31)


@njit(inline="always", cache=True)
def _lanes_of(arr, offset, r):
    """`arr.flat[offset : offset + r]` repeated over the 16 lanes (lane l: element l % r)."""
    if r == 1:
        return vsplat(arr[offset])
    if r == 2:
        return vbcast2(arr, offset)
    return vbcast4(arr, offset)


@njit(inline="always", cache=True)
def _group_sum(a, r):
    """Each run of r lanes replaced by its sum (in every lane of the run)."""
    if r >= 2:
        a = vadd(a, vswap1(a))
    if r == 4:
        a = vadd(a, vswap2(a))
    return a


@njit(inline="always", cache=True)
def _fma8(arr, o, step, r, x, a0, a1, a2, a3, a4, a5, a6, a7):
    """`a_j + lanes(arr at o + j step) * x` for j < 8 (`_lanes_of`): the register tile of
    the packed kernels (8 independent FMA chains)."""
    return (vfma(_lanes_of(arr, o, r), x, a0), vfma(_lanes_of(arr, o + step, r), x, a1),
            vfma(_lanes_of(arr, o + 2 * step, r), x, a2),
            vfma(_lanes_of(arr, o + 3 * step, r), x, a3),
            vfma(_lanes_of(arr, o + 4 * step, r), x, a4),
            vfma(_lanes_of(arr, o + 5 * step, r), x, a5),
            vfma(_lanes_of(arr, o + 6 * step, r), x, a6),
            vfma(_lanes_of(arr, o + 7 * step, r), x, a7))


@njit(cache=True)
def scores_packed(qt, kb, s, hd, nb, r):
    """MP == 16, lanes (m, x) = m r + x holding feature x mod r of query vector m (module
    docstring, "packed"): `s[b, (m, x)] = sum_i kb[b, i] q_m[i]` in every lane of m, 8 keys
    at a time (b < nb rounded up to 8); `qt [hd / r, 16]`."""
    for b0 in range(0, nb, 8):
        a0, a1, a2, a3 = vzero(), vzero(), vzero(), vzero()
        a4, a5, a6, a7 = vzero(), vzero(), vzero(), vzero()
        k = b0 * hd
        for c in range(hd // r):
            a0, a1, a2, a3, a4, a5, a6, a7 = _fma8(kb, k + c * r, hd, r, vload(qt, c * 16),
                                                   a0, a1, a2, a3, a4, a5, a6, a7)
        o = b0 * 16
        vstore(s, o, _group_sum(a0, r))
        vstore(s, o + 16, _group_sum(a1, r))
        vstore(s, o + 32, _group_sum(a2, r))
        vstore(s, o + 48, _group_sum(a3, r))
        vstore(s, o + 64, _group_sum(a4, r))
        vstore(s, o + 80, _group_sum(a5, r))
        vstore(s, o + 96, _group_sum(a6, r))
        vstore(s, o + 112, _group_sum(a7, r))


@njit(cache=True)
def values_2v(vb, s, ot, mp, hd, nb):
    """`ot[d, m] += sum_{b < nb} vb[b, d] s[b, m]`, MP % 32 == 0, hd % 4 == 0."""
    for d0 in range(0, hd, 4):
        for m0 in range(0, mp, 32):
            o = d0 * mp + m0
            a00, a01 = vload(ot, o), vload(ot, o + 16)
            a10, a11 = vload(ot, o + mp), vload(ot, o + mp + 16)
            a20, a21 = vload(ot, o + 2 * mp), vload(ot, o + 2 * mp + 16)
            a30, a31 = vload(ot, o + 3 * mp), vload(ot, o + 3 * mp + 16)
            for b in range(nb):
                p0 = vload(s, b * mp + m0)
                p1 = vload(s, b * mp + m0 + 16)
                v = b * hd + d0
                x = vsplat(vb[v])
                a00 = vfma(x, p0, a00)
                a01 = vfma(x, p1, a01)
                x = vsplat(vb[v + 1])
                a10 = vfma(x, p0, a10)
                a11 = vfma(x, p1, a11)
                x = vsplat(vb[v + 2])
                a20 = vfma(x, p0, a20)
                a21 = vfma(x, p1, a21)
                x = vsplat(vb[v + 3])
                a30 = vfma(x, p0, a30)
                a31 = vfma(x, p1, a31)
            vstore(ot, o, a00)
            vstore(ot, o + 16, a01)
            vstore(ot, o + mp, a10)
            vstore(ot, o + mp + 16, a11)
            vstore(ot, o + 2 * mp, a20)
            vstore(ot, o + 2 * mp + 16, a21)
            vstore(ot, o + 3 * mp, a30)
            vstore(ot, o + 3 * mp + 16, a31)


@njit(cache=True)
def values_packed(vb, s, ot, hd, nb, r):
    """`scores_packed`'s layout: `ot[c, (m, x)] += sum_{b < nb} vb[b, c r + x] s[b, (m, x)]`,
    `ot [hd / r, 16]`, 8 rows of it at a time ((hd / r) % 8 == 0)."""
    for c0 in range(0, hd // r, 8):
        o = c0 * 16
        a0, a1, a2, a3 = vload(ot, o), vload(ot, o + 16), vload(ot, o + 32), vload(ot, o + 48)
        a4, a5, a6, a7 = (vload(ot, o + 64), vload(ot, o + 80), vload(ot, o + 96),
                          vload(ot, o + 112))
        for b in range(nb):
            a0, a1, a2, a3, a4, a5, a6, a7 = _fma8(vb, b * hd + c0 * r, r, r, vload(s, b * 16),
                                                   a0, a1, a2, a3, a4, a5, a6, a7)
        vstore(ot, o, a0)
        vstore(ot, o + 16, a1)
        vstore(ot, o + 32, a2)
        vstore(ot, o + 48, a3)
        vstore(ot, o + 64, a4)
        vstore(ot, o + 80, a5)
        vstore(ot, o + 96, a6)
        vstore(ot, o + 112, a7)


@njit(cache=True, error_model="numpy")
def mask_block(s, mp, nb, k0, lo, hi):
    """`s[b, m] = -inf` where key `k0 + b` is outside column m's `lo[m] .. hi[m]`."""
    for b in range(nb):
        j = k0 + b
        row = s[b * mp:(b + 1) * mp]
        for m in range(mp):
            if j < lo[m] or j > hi[m]:
                row[m] = NEG_INF


@njit(cache=True)
def softmax_block(s, mp, nb, hd, mx, total, alpha, ot):
    """The online-softmax step for `nb` rows of `s [KB, MP]` (module docstring): `s`
    becomes the probabilities, `mx`, `total [MP]` and `ot [hd, MP]` are updated
    (`alpha [MP]` scratch: each column's rescale factor)."""
    for m0 in range(0, mp, 16):
        old = vload(mx, m0)
        new = old
        for b in range(nb):
            new = vmax(vload(s, b * mp + m0), new)
        scale = vexp0(vsub(old, new))
        vstore(alpha, m0, scale)
        vstore(mx, m0, new)
        acc = vmul(vload(total, m0), scale)
        for b in range(nb):
            p = vexp0(vsub(vload(s, b * mp + m0), new))
            vstore(s, b * mp + m0, p)
            acc = vadd(acc, p)
        vstore(total, m0, acc)
    for d in range(hd):
        for m0 in range(0, mp, 16):
            vstore(ot, d * mp + m0, vmul(vload(ot, d * mp + m0), vload(alpha, m0)))


__all__ = ["scores_2v", "scores_packed", "values_2v", "values_packed", "mask_block",
           "softmax_block"]
