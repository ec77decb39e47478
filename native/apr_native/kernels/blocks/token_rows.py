"""Multi-token integer dots (numba): weight rows . the int16 activations of T tokens,
each block unpacked once and dotted with every token (`pair_ir`).

    xp, xdt, xst = pair_layout(xq, xd, xs)
    dot_token_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col)

has the meaning of `block_rows.dot_rows` and gives every token the bits `dot_rows` gives
it when that token is alone: per token, the same integer block sums, the same float32
scale products (`xd d`; the K-quants' `(d sc) xd`, `(xd d) sc`, `(dmin m) xs` as
`kquant_scales` forms them), accumulated by the same `fmuladd` into the same 8 lanes in
block order, the same min terms in block order, the same final lane sum. Only the loop
order differs: blocks outside, tokens inside, so a block's bytes are loaded and
unpacked once for a whole group of tokens, whose running sums stay in registers (up to
`GROUP` tokens, two per 16-lane vector).

The activations are laid out for that (`pair_layout`): per 32-element run, token pairs
side by side half by half, so one 64-byte load feeds one pmaddwd for two tokens; scales
and run sums transposed, so a group's scales are one vector.

Why: speculative verification runs the pending token and a draft (up to ~16 rows) as
one pass, and each row must compute exactly as a one-token decode step (greedy ids
equal plain decoding's); with tokens outermost every row paid the whole unpacking again.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..vector import block_ir, kquant_scales, pair_ir
from .block_table import Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QBLOCK

F32 = np.float32
ONE = np.float32(1.0)
# Most tokens whose running sums one pass over a row keeps in registers (8 pairs).
GROUP = 16


@njit(cache=True)
def padded_tokens(tokens):
    """Token slots of the pair layout: 2, 4, 8 or 16 (one group), else whole groups."""
    slots = 2
    while slots < tokens and slots < GROUP:
        slots *= 2
    return slots if tokens <= GROUP else (tokens + GROUP - 1) // GROUP * GROUP


@njit(cache=True)
def pair_layout(xq, xd, xs):
    """`xq [T, n]` int16, `xd, xs [T, n/32]` -> `xp` int16, flat `[n/32, S/2, 2, 2, 16]`
    (run, token pair, half, token, element), `xdt, xst [n/32, S]` for S =
    `padded_tokens(T)` slots; the spare slots are zeros (their sums are computed, never
    stored)."""
    tokens, n = xq.shape
    runs, slots = n // QBLOCK, padded_tokens(tokens)
    xp = np.zeros(runs * slots * QBLOCK, np.int16)
    xdt = np.zeros((runs, slots), np.float32)
    xst = np.zeros((runs, slots), np.float32)
    for t in range(tokens):
        for q in range(runs):
            for h in range(2):
                for e in range(16):
                    xp[q * slots * 32 + (t // 2) * 64 + h * 32 + (t % 2) * 16 + e] = \
                        xq[t, q * QBLOCK + 16 * h + e]
            xdt[q, t] = xd[t, q]
            xst[q, t] = xs[t, q]
    return xp, xdt, xst


@njit(inline="always", cache=True)
def _k4_block(kind, w, ro, b, xp, xdt, xst, s0, m8, kp, accs):
    """Block `b` of a Q4_K/Q5_K row at byte `ro` for the group at slot `s0`: its scale
    and min products `d sc_j`, `dmin mn_j` into `kp [16]` (`kquant_scales.k4_products`),
    then per 32-element run j the min term `(dmin mn_j) xs` of each token added to
    `m8 [8, GROUP]` and the run's codes unpacked once and dotted with every token of
    the group (scale `(d sc_j) xd`)."""
    p = ro + b * (Q4_K_BYTES if kind == 5 else Q5_K_BYTES)
    q_at = p + (16 if kind == 5 else 48)
    d, dmin = block_ir.load_f16x2(w, p)
    kquant_scales.k4_products(w, p + 4, d, dmin, kp)
    slots = xdt.shape[1]
    pairs = slots // 2
    for i in range(4):
        for half in range(2):
            j = 2 * i + half
            q = b * 8 + j
            pair_ir.axpy_slots(m8, j * GROUP, kp[8 + j], xst, q * slots + s0, accs)
            if kind == 5:
                codes = pair_ir.codes_q4_k(w, q_at + 32 * i, 4 * half)
            else:
                codes = pair_ir.codes_q5_k(w, q_at + 32 * i, 4 * half, p + 16, j)
            accs = pair_ir.acc_pairs(codes, xp, (q * pairs + s0 // 2) * 64, xdt, q * slots + s0,
                                     kp[j], ONE, accs)
    return accs


@njit(inline="always", cache=True)
def _q6_block(w, ro, b, xp, xdt, s0, accs):
    """Block `b` of a Q6_K row at byte `ro` for the group at slot `s0`: each 16-element
    group g unpacked once, scale `(xd d) sc_g`, in `block_rows._q6_run`'s order."""
    p = ro + b * Q6_K_BYTES
    d = block_ir.load_f16x2(w, p + 206)[1]                              # scales[14:16], d
    slots = xdt.shape[1]
    pairs = slots // 2
    for h in range(2):
        for k in range(4):
            ql = p + 64 * h + 32 * (k & 1)
            qh = p + 128 + 32 * h
            gs = 8 * h + 2 * k
            q = b * 8 + 4 * h + k
            for part in range(2):
                codes = pair_ir.codes_q6_k(w, ql + 16 * part, 4 * (k >> 1), qh + 16 * part, 2 * k)
                sc = F32(np.int8(w[p + 192 + gs + part]))
                accs = pair_ir.acc_pairs(codes, xp, (q * pairs + s0 // 2) * 64 + 32 * part, xdt,
                                         q * slots + s0, d, sc, accs)
    return accs


@njit(cache=True)
def _group_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col, t0, count, zeros,
                mins, m8, kp):
    """Rows `r0..r1-1` of a weight (bytes from `o`) . the `count` tokens from `t0` (a
    group: twice the pairs of `zeros`, a tuple of zero `f32x16`) into
    `y[t0:t0 + count, col:col + r1 - r0]`."""
    slots = xdt.shape[1]
    pairs = slots // 2
    width = 2 * len(zeros)
    for r in range(r0, r1):
        c = col + r - r0
        ro = o + r * row_bytes
        accs = zeros
        mv = pair_ir.zero16()                                   # legacy min terms [width]
        if kind == 0:                                      # Q4_0, 18 B
            for b in range(nb):
                p = ro + b * 18
                d = block_ir.load_f16x2(w, p)[0]
                accs = pair_ir.acc_pairs(pair_ir.codes_q4_0(w, p + 2), xp,
                                         (b * pairs + t0 // 2) * 64, xdt, b * slots + t0, d, ONE,
                                         accs)
        elif kind == 1:                                    # Q4_1, 20 B
            for b in range(nb):
                p = ro + b * 20
                d, m = block_ir.load_f16x2(w, p)
                accs = pair_ir.acc_pairs(pair_ir.codes_q4_1(w, p + 4), xp,
                                         (b * pairs + t0 // 2) * 64, xdt, b * slots + t0, d, ONE,
                                         accs)
                mv = pair_ir.acc_mins(mv, m, xst, b * slots + t0, accs)
        elif kind == 2:                                    # Q5_0, 22 B
            for b in range(nb):
                p = ro + b * 22
                d = block_ir.load_f16x2(w, p)[0]
                accs = pair_ir.acc_pairs(pair_ir.codes_q5_0(w, p + 6, p + 2), xp,
                                         (b * pairs + t0 // 2) * 64, xdt, b * slots + t0, d, ONE,
                                         accs)
        elif kind == 3:                                    # Q5_1, 24 B
            for b in range(nb):
                p = ro + b * 24
                d, m = block_ir.load_f16x2(w, p)
                accs = pair_ir.acc_pairs(pair_ir.codes_q5_1(w, p + 8, p + 4), xp,
                                         (b * pairs + t0 // 2) * 64, xdt, b * slots + t0, d, ONE,
                                         accs)
                mv = pair_ir.acc_mins(mv, m, xst, b * slots + t0, accs)
        elif kind == 4:                                    # Q8_0, 34 B
            for b in range(nb):
                p = ro + b * 34
                d = block_ir.load_f16x2(w, p)[0]
                accs = pair_ir.acc_pairs(pair_ir.codes_q8_0(w, p + 2), xp,
                                         (b * pairs + t0 // 2) * 64, xdt, b * slots + t0, d, ONE,
                                         accs)
        elif kind == 5 or kind == 6:                       # Q4_K 144 B, Q5_K 176 B
            for i in range(8 * GROUP):
                m8[i] = 0.0
            for b in range(nb):
                accs = _k4_block(kind, w, ro, b, xp, xdt, xst, t0, m8, kp, accs)
            for g in range(width):              # block_ir.hsum8's order, negated
                mins[g] = -(((m8[g] + m8[4 * GROUP + g]) + (m8[2 * GROUP + g]
                                                            + m8[6 * GROUP + g]))
                            + ((m8[GROUP + g] + m8[5 * GROUP + g])
                               + (m8[3 * GROUP + g] + m8[7 * GROUP + g])))
        else:                                              # Q6_K, 210 B
            for b in range(nb):
                accs = _q6_block(w, ro, b, xp, xdt, t0, accs)
        if kind == 1 or kind == 3:
            for g in range(width):
                mins[g] = pair_ir.lane(mv, g)
        elif kind != 5 and kind != 6:
            for g in range(width):
                mins[g] = 0.0
        for k in range((count + 1) // 2):
            a, b = pair_ir.pair_hsums(accs, k)
            y[t0 + 2 * k, c] = a + mins[2 * k]
            if 2 * k + 1 < count:
                y[t0 + 2 * k + 1, c] = b + mins[2 * k + 1]


@njit(cache=True)
def dot_token_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col):
    """Rows `r0..r1-1` of a weight (block type `kind`, bytes from `o`) . the tokens of
    `y [T, out]` in the pair layout (`pair_layout`) -> `y[t, col + r - r0]`,
    bit-identical per token to `block_rows.dot_rows`."""
    tokens, slots = y.shape[0], xdt.shape[1]
    mins = np.empty(GROUP, np.float32)              # [group] min terms
    m8 = np.empty(8 * GROUP, np.float32)            # [8, group] K-quant min lanes
    kp = np.empty(16, np.float32)                   # a K-quant block's scale products
    z = pair_ir.zero16()
    for t0 in range(0, tokens, GROUP):
        count = min(GROUP, tokens - t0)
        if slots - t0 >= 16:
            _group_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col, t0, count,
                        (z, z, z, z, z, z, z, z), mins, m8, kp)
        elif slots == 8:
            _group_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col, t0, count,
                        (z, z, z, z), mins, m8, kp)
        elif slots == 4:
            _group_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col, t0, count,
                        (z, z), mins, m8, kp)
        else:
            _group_rows(kind, w, o, r0, r1, nb, row_bytes, xp, xdt, xst, y, col, t0, count,
                        (z,), mins, m8, kp)


__all__ = ["dot_token_rows", "pair_layout", "padded_tokens", "GROUP"]
