"""Weight rows . the int8 codes of many tokens (numba): prefill and speculative
verification where one token's dots take int8 codes (the pool's `ACT8`), bit-identical
per token to `block_rows.dot_rows`.

    int8_token_rows(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, y, col)

`xq [T, n]` int8, `xd, xs [T, n/32]` as `block_table.quantize_x8` makes them. Q4_K and
Q6_K rows take the tokens in groups of 8 (then 4): each block is unpacked once for the
group (`vector.kquant_tokens`) and every token's 8-lane sums, min terms and final lane
sum go through the one-token dot's operations in its order, so a token gets the bits
it gets alone; the last tokens past a group of 4, and rows of other types, run
`dot_rows` itself.

Blocking, for the caches (one core: 32 KiB L1, 512 KiB L2): the rows of a chunk are
taken `ROW_BLOCK_BYTES` of weights at a time (kept in L2), and a group's codes
`K_CHUNK` elements at a time (8 tokens: 8 KiB, kept in L1) while every row of the block
meets them; each row keeps its group's sums in `acc` between chunks. Rows outermost
with all tokens inside (every row streaming every token's codes from L2) ran at the L2's
32 bytes a cycle: Q4_K, 1536 wide, 32 tokens, one thread, 34 GMAC/s.
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
def _blocks(kind, w, ro, b0, b1, xq, xd, xs, t, count, acc, ao):
    """Blocks `b0..b1-1` of the row at byte `ro` (Q4_K: kind 5, else Q6_K) . tokens
    `t..t + count - 1` (8 or 4) into the sums at `acc.flat[ao:]`."""
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
                kquant_tokens.q6_k_tokens8(w, p, d, d, xq, xo, n, xd, xs, so, runs, acc, ao)
            else:
                kquant_tokens.q6_k_tokens4(w, p, d, d, xq, xo, n, xd, xs, so, runs, acc, ao)


@njit(cache=True)
def _grouped(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, grouped, y, col):
    """Rows `r0..r1-1` (Q4_K or Q6_K) . the first `grouped` tokens (a multiple of 4)."""
    row_block = max(1, min(r1 - r0, ROW_BLOCK_BYTES // row_bytes))
    acc = np.empty((row_block, ACC), np.float32)                   # [rows, 2 GROUP, 8]
    chunk = K_CHUNK // 256
    for ra in range(r0, r1, row_block):
        rz = min(r1, ra + row_block)
        t = 0
        while t < grouped:
            count = GROUP if t + GROUP <= grouped else 4
            acc[:, :] = 0.0
            for b0 in range(0, nb, chunk):
                b1 = min(nb, b0 + chunk)
                for r in range(ra, rz):
                    _blocks(kind, w, o + r * row_bytes, b0, b1, xq, xd, xs, t, count, acc,
                            (r - ra) * ACC)
            for r in range(ra, rz):
                for g in range(count):
                    mins = -_hsum(acc, r - ra, 8 * (count + g)) if kind == 5 else F32(0.0)
                    y[t + g, col + r - r0] = _hsum(acc, r - ra, 8 * g) + mins
            t += count


@njit(cache=True)
def int8_token_rows(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, y, col):
    """Rows `r0..r1-1` of a weight (block type `kind`, bytes from `o`) . the int8 codes of
    the tokens of `y [T, out]` -> `y[t, col + r - r0]`, bit-identical per token to
    `block_rows.dot_rows`."""
    tokens = xq.shape[0]
    grouped = 0
    if (kind == 5 or kind == 7) and block_ir.byte_codes(xq):        # (int16 codes: dot_rows)
        grouped = tokens // 4 * 4
        _grouped(kind, w, o, r0, r1, nb, row_bytes, xq, xd, xs, grouped, y, col)
    if grouped < tokens:
        dot_rows(kind, w, o, r0, r1, nb, row_bytes, xq[grouped:], xd[grouped:], xs[grouped:],
                 y[grouped:], col)


__all__ = ["int8_token_rows", "GROUP"]
