"""The inner loops of the blocked attention kernel (`cpu_attention`): the two small matrix
products of a (query tile, key block) pair and the online-softmax step between them.

Layout ("query vectors on lanes"): a tile's M query vectors (every query head of one
GQA group for each of its rows) are the columns of its float32 scratch matrices, padded
to MP columns (a multiple of 16 lanes; of 32 when the two-vector kernels run):
    Qt [hd, MP]   the tile's queries, transposed and pre-scaled
    S  [KB, MP]   scores of the key block, then their probabilities
    Ot [hd, MP]   the unnormalized output, rescaled as the running max grows
    Kb, Vb [KB, hd]  the key block's keys and values decoded to float32
so every vector operation runs along M and each K or V element is one broadcast
(`vec16`): a score tile is KB x hd broadcasts of keys times Qt rows, the output update
hd x KB broadcasts of values times S rows. The register tiles are 4 keys (or 4 output
features) x 2 vectors, or 8 x 1 vector when MP is 16 (one decode row of a small GQA
group): 8 accumulators, enough independent FMAs to cover their latency.

Softmax per column m (FlashAttention's online form): the block's new max M' =
max(M, max_b S[b, m]); the old sum and Ot column are multiplied by e^(M - M'); p =
e^(S - M') is added to the sum. exp is `vec16.vexp0` (fastexp's expf on 16 lanes, <= 1 ulp); an
argument below its clamp (-87) gives exactly 0, so masked keys (-inf) and empty columns
contribute nothing.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .vec16 import vadd, vexp0, vfma, vload, vmax, vmul, vsplat, vstore, vsub, vzero

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


@njit(cache=True)
def scores_1v(qt, kb, s, hd, nb):
    """`scores_2v` for MP == 16, 8 keys at a time (b < nb rounded up to 8)."""
    for b0 in range(0, nb, 8):
        a0, a1, a2, a3 = vzero(), vzero(), vzero(), vzero()
        a4, a5, a6, a7 = vzero(), vzero(), vzero(), vzero()
        k = b0 * hd
        for i in range(hd):
            q = vload(qt, i * 16)
            a0 = vfma(vsplat(kb[k + i]), q, a0)
            a1 = vfma(vsplat(kb[k + hd + i]), q, a1)
            a2 = vfma(vsplat(kb[k + 2 * hd + i]), q, a2)
            a3 = vfma(vsplat(kb[k + 3 * hd + i]), q, a3)
            a4 = vfma(vsplat(kb[k + 4 * hd + i]), q, a4)
            a5 = vfma(vsplat(kb[k + 5 * hd + i]), q, a5)
            a6 = vfma(vsplat(kb[k + 6 * hd + i]), q, a6)
            a7 = vfma(vsplat(kb[k + 7 * hd + i]), q, a7)
        o = b0 * 16
        vstore(s, o, a0)
        vstore(s, o + 16, a1)
        vstore(s, o + 32, a2)
        vstore(s, o + 48, a3)
        vstore(s, o + 64, a4)
        vstore(s, o + 80, a5)
        vstore(s, o + 96, a6)
        vstore(s, o + 112, a7)


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
def values_1v(vb, s, ot, hd, nb):
    """`values_2v` for MP == 16, 8 output features at a time (hd % 8 == 0)."""
    for d0 in range(0, hd, 8):
        o = d0 * 16
        a0, a1, a2, a3 = vload(ot, o), vload(ot, o + 16), vload(ot, o + 32), vload(ot, o + 48)
        a4, a5, a6, a7 = (vload(ot, o + 64), vload(ot, o + 80), vload(ot, o + 96),
                          vload(ot, o + 112))
        for b in range(nb):
            p = vload(s, b * 16)
            v = b * hd + d0
            a0 = vfma(vsplat(vb[v]), p, a0)
            a1 = vfma(vsplat(vb[v + 1]), p, a1)
            a2 = vfma(vsplat(vb[v + 2]), p, a2)
            a3 = vfma(vsplat(vb[v + 3]), p, a3)
            a4 = vfma(vsplat(vb[v + 4]), p, a4)
            a5 = vfma(vsplat(vb[v + 5]), p, a5)
            a6 = vfma(vsplat(vb[v + 6]), p, a6)
            a7 = vfma(vsplat(vb[v + 7]), p, a7)
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


__all__ = ["scores_2v", "scores_1v", "values_2v", "values_1v", "mask_block",
           "softmax_block"]
