"""numba CPU backend: the kernel-registry "matmul" protocol over quantized weights.

    y = matmul(data, dtype, shape, x, scratch_elements)     # x [T, in] -> y [T, out]

Few tokens (decode, speculative verification; T <= `DOT_MAX_TOKENS`): activations are
quantized to int16 per run of 32 and every weight row is dotted block by block in
integers (each block's products folded into one 8-lane float vector, summed once per
row), rows cut into chunks that the threads of `pool` take; the weights are read once,
never dequantized. One token runs `block_rows.dot_rows`; several run
`token_rows.dot_token_rows`, which unpacks each block once for all of them and gives
every token exactly the bits it gets alone, so a verification pass over a draft computes
what decode steps would. Accuracy: each activation moves by
at most half a step, amax / 65534 of its run -- a relative error ~1e-5 on a row's dot, far
below llama.cpp's 8-bit activations (amax / 254), so greedy tokens follow numpy's even at
near ties (tests/native/test_numba_kernels.py bounds it, test_numba_parity.py checks tokens).

Many tokens (prefill): rows are dequantized four at a time (bit-exact to the numpy
reference) into a small tile and dotted with every token in float32, each token's
activations loaded once per four rows, so prefill matches the numpy backend to float32
summation order.
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from numba import njit, prange

from . import pool
from .blocks.block_table import BLOCKS, quantize_x
from .blocks.block_rows import dequantize_row

from ..numba_rows import DOT_MAX_TOKENS  # noqa: E402  (re-exported)


@njit(parallel=True, cache=True)
def dequantize_rows(kind, w, start, stop, nb, row_bytes, out):
    """Rows `start..stop` -> `out [stop - start, in]` float32."""
    for i in prange(stop - start):
        dequantize_row(kind, w, (start + i) * row_bytes, nb, out[i])


def layout(dtype_name: str, shape: Tuple[int, int]) -> Tuple[int, int, int]:
    """(kind code, blocks per row, bytes per row) of a quantized `[out, in]` weight."""
    kind, block, size = BLOCKS[dtype_name]
    nb = shape[1] // block
    return kind, nb, nb * size


def quantized_x(x: np.ndarray):
    """`x [T, in]` f32 -> (codes int16 [T, in], scales f32 [T, in/32], run sums f32
    [T, in/32]: scale times the run's code sum)."""
    return quantize_x(np.ascontiguousarray(x, np.float32))


def dequantize(data: np.ndarray, dtype_name: str, shape: Tuple[int, int], start: int = 0,
               stop: int = -1, out: np.ndarray = None) -> np.ndarray:
    """Rows `start..stop` of a `[out, in]` weight as float32 `[rows, in]`."""
    kind, nb, row_bytes = layout(dtype_name, shape)
    stop = shape[0] if stop < 0 else stop
    if out is None:
        out = np.empty((stop - start, shape[1]), np.float32)
    dequantize_rows(kind, data, start, stop, nb, row_bytes, out)
    return out


def numba_matmul(data: np.ndarray, dtype, shape: Tuple[int, int], x: np.ndarray,
                 scratch_elements: int) -> np.ndarray:
    """Kernel protocol for kind "matmul" (see apr_core.model.weights.numpy_matmul)."""
    out_dim, in_dim = shape
    kind, nb, row_bytes = layout(dtype.name, shape)
    data = np.ascontiguousarray(data)           # the pool's tasks address it by pointer
    if x.shape[0] <= DOT_MAX_TOKENS:
        y = np.empty((x.shape[0], out_dim), np.float32)           # [T, out]
        workers = pool.get()
        pool.dots_one(*workers.shared, kind, data, out_dim, nb, row_bytes,
                      np.ascontiguousarray(x, np.float32), y, workers.chunks(data.nbytes))
        return y
    # One pool task over rows, no BLAS: numpy's BLAS runs its own thread pool, and two
    # pools taking turns on the same cores (each spinning while the other works) made a
    # 32-token prefill 7x slower than either alone on this 2-core machine.
    y = np.empty((x.shape[0], out_dim), np.float32)                # [T, out]
    workers = pool.get()
    pool.products_one(*workers.shared, kind, data, out_dim, nb, row_bytes,
                      np.ascontiguousarray(x, np.float32), y, workers.row_chunks(out_dim))
    return y


def _row(linear: Any) -> Tuple[int, int, int, int, int]:
    """`pool` weight-table row of a quantized Linear: kind, address, rows, nb, row bytes."""
    kind, nb, row_bytes = layout(linear.dtype.name, linear.shape)
    return kind, linear.data.__array_interface__["data"][0], linear.shape[0], nb, row_bytes


class WeightTable(NamedTuple):
    """Quantized weights sharing an input, as one `pool` task sees them."""
    table: np.ndarray         # [n, 5] int64: kind, address, rows, blocks/row, bytes/row
    rows: int                 # their rows in all (columns of the task's `y`)
    nbytes: int               # their weight bytes in all


# tuple of Linear ids -> (their WeightTable or None when one is not a quantized weight
# kept in memory,). The Linears are not held: each entry goes when any of its Linears is
# collected (a finalizer), before its id can name another object, so an unloaded model's
# projections and their views of the mmap'd file are freed with it.
_tables: Dict[Tuple[int, ...], Tuple[Optional[WeightTable]]] = {}


def weight_table(linears: Sequence[Any]) -> Optional[WeightTable]:
    """The `pool` table of `linears` (cached), or None if one is not quantized in memory."""
    key = tuple(map(id, linears))
    entry = _tables.get(key)
    if entry is None:
        found = None
        if all(l.data is not None and l.weight is None and l.dtype.name in BLOCKS
               and l.data.flags.c_contiguous for l in linears):
            table = np.array([_row(l) for l in linears], np.int64)
            found = WeightTable(table, int(table[:, 2].sum()),
                                int((table[:, 2] * table[:, 4]).sum()))
        entry = _tables[key] = (found,)
        for linear in linears:
            weakref.finalize(linear, _tables.pop, key, None)
    return entry[0]


def numba_matmul_group(linears: Sequence[Any], x: np.ndarray) -> List[np.ndarray]:
    """Kernel protocol for kind "matmul_group": quantized projections sharing the input
    `x [T, in]` run as one pool task; anything else one by one."""
    weights = weight_table(linears)
    if weights is None:
        return [linear.matmul(x) for linear in linears]
    y = np.empty((x.shape[0], weights.rows), np.float32)            # [T, sum out]
    workers = pool.get()
    x = np.ascontiguousarray(x, np.float32)
    if x.shape[0] <= DOT_MAX_TOKENS:
        pool.dots(*workers.shared, weights.table, x, y, workers.chunks(weights.nbytes))
    else:
        pool.products(*workers.shared, weights.table, x, y, workers.row_chunks(weights.rows))
    outs, first = [], 0
    for linear in linears:                                           # views, no copies
        out = y[:, first:first + linear.shape[0]]
        outs.append(out if linear.bias is None else out + linear.bias)
        first += linear.shape[0]
    return outs


SUPPORTED = tuple(BLOCKS)

__all__ = ["layout", "numba_matmul", "numba_matmul_group", "weight_table", "WeightTable",
           "dequantize", "quantized_x", "dequantize_rows", "DOT_MAX_TOKENS", "SUPPORTED"]
