"""numba CPU backend: the kernel-registry "matmul" protocol over quantized weights.

    y = matmul(data, dtype, shape, x, scratch_elements)     # x [T, in] -> y [T, out]

Few tokens (decode, T <= `DOT_MAX_TOKENS`): activations are quantized to int16 per run of
32 and every weight row is dotted block by block in integers (each block's products
folded into one 8-lane float vector, summed once per row: `cpu_blocks.dot_rows`), rows
cut into a few chunks per numba thread; the weights are read once, never dequantized. Accuracy: each activation moves by
at most half a step, amax / 65534 of its run -- a relative error ~1e-5 on a row's dot, far
below llama.cpp's 8-bit activations (amax / 254), so greedy tokens follow numpy's even at
near ties (tests/test_numba_kernels.py bounds it, test_numba_parity.py checks tokens).

Many tokens (prefill): rows are dequantized four at a time (bit-exact to the numpy
reference) into a small tile and dotted with every token in float32, each token's
activations loaded once per four rows, so prefill matches the numpy backend to float32
summation order.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from numba import config, njit, prange

from .common import BLOCKS, quantize_x
from .cpu_blocks import dequantize_row, dot_rows

# Above this many tokens a BLAS matmul on dequantized rows beats T integer dots per block.
DOT_MAX_TOKENS = 4


# Weights smaller than this run serially in decode: waking the passive OpenMP workers
# costs ~50-100 us in this VM, more than a 0.5 MB matvec takes on one core (measured:
# SmolLM2 decoded at 47 tok/s on 1 thread, 29 on 2 with every matvec parallel).
PARALLEL_MIN_BYTES = 2 << 20

# Parallel work is split into this many chunks per thread. A chunk runs a plain serial
# loop (`cpu_blocks.dot_rows`): a prange over single rows compiled to a loop body that
# ran 1.7x slower than the same loop serial, per thread. A few chunks per thread even
# out rows of unequal cost across the weights of a group.
CHUNKS_PER_THREAD = 2


@njit(parallel=True, cache=True)
def matvec(kind, w, rows, nb, row_bytes, x, y, chunks):
    """`y [T, rows]` = weight rows . `x [T, in]` quantized to int16, in `chunks` parallel
    pieces."""
    xq, xd, xs = quantize_x(x)
    n = min(rows, chunks)
    for c in prange(n):
        r0, r1 = c * rows // n, (c + 1) * rows // n
        dot_rows(kind, w, 0, r0, r1, nb, row_bytes, xq, xd, xs, y, r0)


@njit(cache=True)
def group_rows(table, w, xq, xd, xs, y, a, b):
    """Serial: columns `a..b-1` of `y [T, sum of rows]` for the weights of `table [n, 5]`
    rows (kind, byte offset in `w`, rows, blocks per row, row bytes), concatenated."""
    first = 0
    for g in range(table.shape[0]):
        last = first + table[g, 2]
        lo, hi = max(a, first), min(b, last)
        if lo < hi:
            dot_rows(table[g, 0], w, table[g, 1], lo - first, hi - first, table[g, 3],
                     table[g, 4], xq, xd, xs, y, lo)
        first = last


@njit(parallel=True, cache=True)
def matvec_group(table, w, x, y, chunks):
    """Several weights in one parallel region (`group_rows`): chunks cut the
    concatenated rows evenly; a chunk spanning two weights runs a piece of each."""
    xq, xd, xs = quantize_x(x)
    total = y.shape[1]
    n = min(total, chunks)
    for c in prange(n):
        group_rows(table, w, xq, xd, xs, y, c * total // n, (c + 1) * total // n)


@njit(fastmath=True, cache=True)
def rows_times_tokens(kind, w, r0, r1, nb, row_bytes, x, y, tile):
    """Serial: `y[:, r0:r1]` = rows r0..r1-1 of W . `x [T, in]`. Four rows are
    dequantized at a time into `tile [4, in]` (bit-exact) and each token's activations
    are loaded once for all four: the sums run as four vector accumulators (fastmath lets
    LLVM vectorize them, so their order differs from BLAS's: ~1e-6 relative)."""
    n = x.shape[1]
    r = r0
    while r < r1:
        m = min(4, r1 - r)
        for j in range(m):
            dequantize_row(kind, w, (r + j) * row_bytes, nb, tile[j])
        if m == 4:
            for t in range(x.shape[0]):
                a0 = a1 = a2 = a3 = np.float32(0.0)
                for i in range(n):
                    xi = x[t, i]
                    a0 += tile[0, i] * xi
                    a1 += tile[1, i] * xi
                    a2 += tile[2, i] * xi
                    a3 += tile[3, i] * xi
                y[t, r], y[t, r + 1], y[t, r + 2], y[t, r + 3] = a0, a1, a2, a3
        else:
            for j in range(m):
                for t in range(x.shape[0]):
                    acc = np.float32(0.0)
                    for i in range(n):
                        acc += tile[j, i] * x[t, i]
                    y[t, r + j] = acc
        r += m


@njit(parallel=True, cache=True)
def matmul_rows(kind, w, rows, nb, row_bytes, x, y, chunks):
    """`y [T, rows]` = W `x [T, in]` in `chunks` parallel pieces of `rows_times_tokens`."""
    n = min(rows, chunks)
    for c in prange(n):
        tile = np.empty((4, x.shape[1]), np.float32)               # [4, in], L1-resident
        rows_times_tokens(kind, w, c * rows // n, (c + 1) * rows // n, nb, row_bytes, x, y,
                          tile)


@njit(parallel=True, cache=True)
def dequantize_rows(kind, w, start, stop, nb, row_bytes, out):
    """Rows `start..stop` -> `out [stop - start, in]` float32."""
    for i in prange(stop - start):
        dequantize_row(kind, w, (start + i) * row_bytes, nb, out[i])


def chunks() -> int:
    """Parallel pieces for a kernel call: CHUNKS_PER_THREAD per thread numba may run
    (its configured maximum: `numba.get_num_threads()` from Python costs ~10 us)."""
    return config.NUMBA_NUM_THREADS * CHUNKS_PER_THREAD


def layout(dtype_name: str, shape: Tuple[int, int]) -> Tuple[int, int, int]:
    """(kind code, blocks per row, bytes per row) of a quantized `[out, in]` weight."""
    kind, block, size = BLOCKS[dtype_name]
    nb = shape[1] // block
    return kind, nb, nb * size


def quantized_x(x: np.ndarray):
    """`x [T, in]` f32 -> (codes int16 [T, in], scales f32 [T, in/32], sums int32 [T, in/32])."""
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
    if x.shape[0] <= DOT_MAX_TOKENS:
        y = np.empty((x.shape[0], out_dim), np.float32)           # [T, out]
        x = np.ascontiguousarray(x, np.float32)
        if out_dim * row_bytes < PARALLEL_MIN_BYTES:
            xq, xd, xs = quantize_x(x)
            dot_rows(kind, data, 0, 0, out_dim, nb, row_bytes, xq, xd, xs, y, 0)
        else:
            matvec(kind, data, out_dim, nb, row_bytes, x, y, chunks())
        return y
    # One parallel region over rows, no BLAS: numpy's BLAS runs its own thread pool, and
    # two pools taking turns on the same cores (each spinning while the other works)
    # made a 32-token prefill 7x slower than either alone on this 2-core machine.
    y = np.empty((x.shape[0], out_dim), np.float32)                # [T, out]
    matmul_rows(kind, data, out_dim, nb, row_bytes, np.ascontiguousarray(x, np.float32), y,
                chunks())
    return y


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# tuple of Linear ids -> (the Linears, shared buffer, table, row splits); the Linears are
# held so their ids stay theirs.
_groups: Dict[Tuple[int, ...], Any] = {}


def _group_plan(linears: Sequence[Any]) -> Any:
    key = tuple(id(l) for l in linears)
    plan = _groups.get(key)
    if plan is not None:
        return plan
    plan = False
    datas = [l.data for l in linears]
    if all(d is not None and l.dtype.name in BLOCKS for d, l in zip(datas, linears)):
        base = _root(datas[0])
        # One buffer behind all of them (the mmap loader's views of one file mapping).
        if all(_root(d) is base for d in datas) and base.dtype == np.uint8 and base.ndim == 1:
            table = np.array([layout(l.dtype.name, l.shape)[:1] + (
                _address(d) - _address(base), l.shape[0]) + layout(l.dtype.name, l.shape)[1:]
                for l, d in zip(linears, datas)], np.int64)
            ends = np.cumsum([l.shape[0] for l in linears]).tolist()
            splits = list(zip([0] + ends[:-1], ends))                # column ranges in y
            plan = (list(linears), base, table, splits)
    _groups[key] = plan
    return plan


def numba_matmul_group(linears: Sequence[Any], x: np.ndarray) -> List[np.ndarray]:
    """Kernel protocol for kind "matmul_group": quantized projections sharing the input
    `x [T, in]`, mapped from one file, run as one kernel; anything else one by one."""
    plan = _group_plan(linears) if x.shape[0] <= DOT_MAX_TOKENS else False
    if not plan:
        return [linear.matmul(x) for linear in linears]
    _, base, table, splits = plan
    y = np.empty((x.shape[0], int(table[:, 2].sum())), np.float32)   # [T, sum out]
    x = np.ascontiguousarray(x, np.float32)
    if int((table[:, 2] * table[:, 4]).sum()) < PARALLEL_MIN_BYTES:
        xq, xd, xs = quantize_x(x)
        group_rows(table, base, xq, xd, xs, y, 0, y.shape[1])
    else:
        matvec_group(table, base, x, y, chunks())
    outs = [y[:, a:b] for a, b in splits]                            # views, no copies
    for i, linear in enumerate(linears):
        if linear.bias is not None:
            outs[i] = outs[i] + linear.bias
    return outs


SUPPORTED = tuple(BLOCKS)

__all__ = ["layout", "chunks", "group_rows", "PARALLEL_MIN_BYTES", "numba_matmul", "numba_matmul_group", "matvec_group", "dequantize", "quantized_x", "matvec", "dequantize_rows",
           "DOT_MAX_TOKENS", "SUPPORTED"]
