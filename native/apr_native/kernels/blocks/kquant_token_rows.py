"""Weight rows . the int8 codes of many tokens (numba): prefill and speculative
verification where one token's dots take int8 codes (the pool's `ACT8`), bit-identical
per token to `block_rows.dot_rows`.

    int8_token_rows(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, y, col)

`xq [T, n]` int8, `xd, xs [T, n/32]` as `block_table.quantize_x8` makes them. Q4_K and
Q6_K rows take the tokens in groups of 8 (then 4): each block is unpacked once for the
group (`vector.kquant_tokens`) and every token's 8-lane sums, min terms and final lane
sum go through the one-token dot's operations in its order, so a token gets the bits
it gets alone; the last tokens past a group of 4, and rows of other types, run
`dot_rows` itself. Q6_K rows take the codes offset to x + 128 (`_offset_codes`, once per
call) and each block's excess over the one-token sums (`kquant_tokens.q6_k_bias`), once
per call too, in a pass over a block of rows before its token groups.

Blocking, for the caches (one core: 32 KiB L1, 512 KiB L2): the rows of a chunk are
taken `ROW_BLOCK_BYTES` of weights at a time (kept in L2), and a group's codes
`K_CHUNK` elements at a time (8 tokens: 8 KiB, kept in L1) while every row of the block
meets them; each row keeps its group's sums in `acc` between chunks. Rows outermost
with all tokens inside (every row streaming every token's codes from L2) ran at the L2's
32 bytes a cycle: Q4_K, 1536 wide, 32 tokens, one thread, 34 GMAC/s. The Q6_K excess
pass reads a block of rows in order, row after row, before the token groups meet it:
their first pass over the block, a chunk of each row in turn, had seemingly waited on
memory. One thread, AVX2 EPYC (Zen 3), load 2-3, Q6_K 1536 x 8960 and 3584 x 18944:
32 tokens 29-32 -> 36-43 GMAC/s, 8 tokens 19-20 -> 32-33, 4 tokens 10-11 -> 21-22;
26 rows already in L2: 42 -> 42 (Q4_K, which has no such pass: 54-56 at 32 tokens).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..vector import block_ir, kquant_tokens
from .block_rows import dot_rows
from .block_table import Q4_K_BYTES, Q6_K_BYTES

F32 = np.float32
GROUP = 8                          # tokens a block is unpacked for (then 4)
K_CHUNK = 1024                     # elements of a group's codes kept in L1 (4 blocks)
ROW_BLOCK_BYTES = 192 << 10        # weight bytes of a block of rows (kept in L2)
ACC = 2 * GROUP * 8                # floats of a row's group sums: [2 GROUP, 8]


@njit(inline="always", cache=True)
def _hsum(acc, i, at):
    """`block_ir.hsum8`'s pairwise lane sum of `acc[i, at:at + 8]`."""
    return (((acc[i, at] + acc[i, at + 4]) + (acc[i, at + 2] + acc[i, at + 6]))
            + ((acc[i, at + 1] + acc[i, at + 5]) + (acc[i, at + 3] + acc[i, at + 7])))


@njit(inline="always", cache=True)
def _blocks(kind, w, ro, b0, b1, xq, xd, xs, t, count, acc, ao, bias, bo):
    """Blocks `b0..b1-1` of the row at byte `ro` (Q4_K: kind 5, else Q6_K: offset codes,
    its blocks' excesses at `bias[bo:]`) . tokens `t..t + count - 1` (8 or 4) into the
    sums at `acc.flat[ao:]`."""
    n, runs = xq.shape[1], xd.shape[1]
    for b in range(b0, b1):
        xo, so = t * n + b * 256, t * runs + b * 8
        if kind == 5:
            p = ro + b * Q4_K_BYTES
            d, dmin = block_ir.load_f16x2(w, p)
            if count == 8:
                kquant_tokens.q4_k_tokens8(w, p, d, dmin, xq, xo, n, xd, xs, so, runs, acc, ao)
            else:
                kquant_tokens.q4_k_tokens4(w, p, d, dmin, xq, xo, n, xd, xs, so, runs, acc, ao)
        else:
            p = ro + b * Q6_K_BYTES
            d = block_ir.load_f16x2(w, p + 206)[1]                          # scales[14:16], d
            if count == 8:
                kquant_tokens.q6_k_tokens8(w, p, d, bo + 8 * b, xq, xo, n, xd, bias, so, runs,
                                           acc, ao)
            else:
                kquant_tokens.q6_k_tokens4(w, p, d, bo + 8 * b, xq, xo, n, xd, bias, so, runs,
                                           acc, ao)


@njit(inline="always", cache=True)
def _excesses(w, o, ra, rz, nb, row_bytes, bias):
    """`kquant_tokens.q6_k_bias` of every block of rows `ra..rz-1` into `bias`
    ([rows, nb, 8] flat), row after row."""
    for r in range(ra, rz):
        for b in range(nb):
            kquant_tokens.q6_k_bias(w, o + r * row_bytes + b * Q6_K_BYTES, bias,
                                    ((r - ra) * nb + b) * 8)


@njit(cache=True)
def _grouped(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, grouped, y, col):
    """Rows `r0..r1-1` (Q4_K or Q6_K: `xq` offset) . the first `grouped` tokens (a
    multiple of 4)."""
    row_block = max(1, min(r1 - r0, ROW_BLOCK_BYTES // row_bytes))
    acc = np.empty((row_block, ACC), np.float32)                   # [rows, 2 GROUP, 8]
    bias = np.empty(row_block * nb * 8 if kind == 7 else 0, np.int32)  # Q6_K excesses
    chunk = K_CHUNK // 256
    for ra in range(r0, r1, row_block):
        rz = min(r1, ra + row_block)
        if kind == 7:
            _excesses(w, o, ra, rz, nb, row_bytes, bias)
        t = 0
        while t < grouped:
            count = GROUP if t + GROUP <= grouped else 4
            acc[:, :] = 0.0
            for b0 in range(0, nb, chunk):
                b1 = min(nb, b0 + chunk)
                for r in range(ra, rz):
                    _blocks(kind, w, o + r * row_bytes, b0, b1, xq, xd, xs, t, count, acc,
                            (r - ra) * ACC, bias, (r - ra) * nb * 8)
            for r in range(ra, rz):
                for g in range(count):
                    mins = -_hsum(acc, r - ra, 8 * (count + g)) if kind == 5 else F32(0.0)
                    y[t + g, col + r - r0] = _hsum(acc, r - ra, 8 * g) + mins
            t += count


@njit(cache=True)
def _offset_codes(xq):
    """int8 codes x -> the bytes x XOR 0x80 (read unsigned, x + 128 in [1, 255]): the Q6_K
    group dots' activations (`vector.kquant_tokens`)."""
    return xq ^ np.int8(-128)


@njit(cache=True)
def int8_token_rows(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, y, col):
    """Rows `r0..r1-1` of a weight (block type `kind`, bytes from `o`) . the int8 codes of
    the tokens of `y [T, out]` -> `y[t, col + r - r0]`, bit-identical per token to
    `block_rows.dot_rows`."""
    tokens = xq.shape[0]
    grouped = 0
    if (kind == 5 or kind == 7) and block_ir.byte_codes(xq):        # (int16 codes: dot_rows)
        grouped = tokens // 4 * 4
        codes = _offset_codes(xq) if kind == 7 else xq
        _grouped(kind, w, o, r0, r1, nb, row_bytes, codes, xd, xs, grouped, y, col)
    if grouped < tokens:
        dot_rows(kind, w, o, r0, r1, nb, row_bytes, xq[grouped:], xd[grouped:], xs[grouped:],
                 y[grouped:], col)


__all__ = ["int8_token_rows", "GROUP"]
