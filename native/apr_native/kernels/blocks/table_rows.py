"""Rows of a weight table (the weights one pool task covers, their rows concatenated)
dotted with quantized activations or multiplied with float ones: the chunk body of
`pool`'s weight tasks.
"""
from __future__ import annotations

from numba import carray, njit

from ..vector.atomics import u8_at
from .block_rows import dot_rows, rows_times_tokens
from .kquant_token_rows import int8_token_rows
from .token_rows import dot_token_rows

# Weight table columns (one row per weight): block kind, address, rows, blocks per row,
# bytes per row.
T_KIND, T_ADDRESS, T_ROWS, T_BLOCKS, T_ROW_BYTES = range(5)
TABLE_COLUMNS = 5


@njit(cache=True)
def table_rows(table, a, b, xq, xd, xs, xp, xdt, xst, x, tile, y, mode):
    """Rows `a..b-1` of the weights of `table` concatenated, into the same columns of `y`:
    mode 0 integer dots with `xq, xd, xs` (`block_rows.dot_rows`), 1 with the pair layout
    `xp, xdt, xst` (`token_rows.dot_token_rows`), 2 float products of dequantized rows with
    `x` (`block_rows.rows_times_tokens`, `tile` scratch), 3 int8 dots of many tokens with
    `xq, xd, xs` (`kquant_token_rows.int8_token_rows`)."""
    first = 0
    for g in range(table.shape[0]):
        rows, row_bytes = table[g, T_ROWS], table[g, T_ROW_BYTES]
        last = first + rows
        lo, hi = max(a, first), min(b, last)
        if lo < hi:
            w = carray(u8_at(table[g, T_ADDRESS]), rows * row_bytes)
            if mode == 2:
                rows_times_tokens(table[g, T_KIND], w, 0, lo - first, hi - first,
                                  table[g, T_BLOCKS], row_bytes, x, y, lo, tile)
            elif mode == 3:
                int8_token_rows(table[g, T_KIND], w, 0, lo - first, hi - first,
                                table[g, T_BLOCKS], row_bytes, xq, xd, xs, y, lo)
            elif mode == 1:
                dot_token_rows(table[g, T_KIND], w, 0, lo - first, hi - first,
                               table[g, T_BLOCKS], row_bytes, xp, xdt, xst, y, lo)
            else:
                dot_rows(table[g, T_KIND], w, 0, lo - first, hi - first, table[g, T_BLOCKS],
                         row_bytes, xq, xd, xs, y, lo)
        first = last
