"""numba CPU backend: the kernel-registry "matmul" protocol over quantized weights.

    y = matmul(data, dtype, shape, x, scratch_elements)     # x [T, in] -> y [T, out]

Few tokens (decode, T <= `DOT_MAX_TOKENS`): activations are quantized to int16 per run of
32 and every weight row is dotted block by block in integers, rows spread over the numba
threads; the weights are read once, never dequantized. Accuracy: each activation moves by
at most half a step, amax / 65534 of its run -- a relative error ~1e-5 on a row's dot, far
below llama.cpp's 8-bit activations (amax / 254), so greedy tokens follow numpy's even at
near ties (tests/test_numba_kernels.py bounds it, test_numba_parity.py checks tokens).

Many tokens (prefill): each row is dequantized once (bit-exact to the numpy reference)
into a small per-row buffer and dotted with every token in float32, so prefill matches
the numpy backend to float32 summation order.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from numba import njit, prange

from .common import BLOCKS, QBLOCK, quantize_activations
from .cpu_blocks import dequantize_row, dot_row

# Above this many tokens a BLAS matmul on dequantized rows beats T integer dots per block.
DOT_MAX_TOKENS = 4


@njit(parallel=True, cache=True)
def matvec(kind, w, rows, nb, row_bytes, xq, xd, xs, y):
    """`y [T, rows]` = weight rows . quantized activations (`xq [T, in]` ...)."""
    for r in prange(rows):
        o = r * row_bytes
        for t in range(xq.shape[0]):
            y[t, r] = dot_row(kind, w, o, nb, xq[t], xd[t], xs[t])


@njit(parallel=True, cache=True)
def matvec_group(table, w, xq, xd, xs, y):
    """Several weights in one parallel region: `table [n, 5]` rows (kind, byte offset in
    `w`, rows, blocks per row, row bytes); `y [T, sum of rows]` in table order."""
    for r in prange(y.shape[1]):
        g, first = 0, 0
        while r >= first + table[g, 2]:
            first += table[g, 2]
            g += 1
        o = table[g, 1] + (r - first) * table[g, 4]
        for t in range(xq.shape[0]):
            y[t, r] = dot_row(table[g, 0], w, o, table[g, 3], xq[t], xd[t], xs[t])


@njit(parallel=True, fastmath=True, cache=True)
def matmul_rows(kind, w, rows, nb, row_bytes, x, y):
    """`y [T, rows]` = W `x [T, in]`: each row dequantized once (bit-exact) into a small
    buffer, then dotted with every token in float32 (fastmath lets LLVM vectorize the
    sums, so their order differs from BLAS's: ~1e-6 relative)."""
    n = x.shape[1]
    for r in prange(rows):
        row = np.empty(n, np.float32)                              # [in], L1-resident
        dequantize_row(kind, w, r * row_bytes, nb, row)
        for t in range(x.shape[0]):
            acc = np.float32(0.0)
            for i in range(n):
                acc += row[i] * x[t, i]
            y[t, r] = acc


@njit(parallel=True, cache=True)
def dequantize_rows(kind, w, start, stop, nb, row_bytes, out):
    """Rows `start..stop` -> `out [stop - start, in]` float32."""
    for i in prange(stop - start):
        dequantize_row(kind, w, (start + i) * row_bytes, nb, out[i])


def _layout(dtype_name: str, shape: Tuple[int, int]) -> Tuple[int, int, int]:
    kind, block, size = BLOCKS[dtype_name]
    nb = shape[1] // block
    return kind, nb, nb * size


def quantized_x(x: np.ndarray):
    """`x [T, in]` f32 -> (codes int16 [T, in], scales f32 [T, in/32], sums int32 [T, in/32])."""
    t, n = x.shape
    xq = np.empty((t, n), np.int16)
    xd = np.empty((t, n // QBLOCK), np.float32)
    xs = np.empty((t, n // QBLOCK), np.int32)
    quantize_activations(x, xq, xd, xs)
    return xq, xd, xs


def dequantize(data: np.ndarray, dtype_name: str, shape: Tuple[int, int], start: int = 0,
               stop: int = -1, out: np.ndarray = None) -> np.ndarray:
    """Rows `start..stop` of a `[out, in]` weight as float32 `[rows, in]`."""
    kind, nb, row_bytes = _layout(dtype_name, shape)
    stop = shape[0] if stop < 0 else stop
    if out is None:
        out = np.empty((stop - start, shape[1]), np.float32)
    dequantize_rows(kind, data, start, stop, nb, row_bytes, out)
    return out


def numba_matmul(data: np.ndarray, dtype, shape: Tuple[int, int], x: np.ndarray,
                 scratch_elements: int) -> np.ndarray:
    """Kernel protocol for kind "matmul" (see apr_core.model.weights.numpy_matmul)."""
    out_dim, in_dim = shape
    kind, nb, row_bytes = _layout(dtype.name, shape)
    if x.shape[0] <= DOT_MAX_TOKENS:
        xq, xd, xs = quantized_x(x)
        y = np.empty((x.shape[0], out_dim), np.float32)           # [T, out]
        matvec(kind, data, out_dim, nb, row_bytes, xq, xd, xs, y)
        return y
    # One parallel region over rows, no BLAS: numpy's BLAS runs its own thread pool, and
    # two pools taking turns on the same cores (each spinning while the other works)
    # made a 32-token prefill 7x slower than either alone on this 2-core machine.
    y = np.empty((x.shape[0], out_dim), np.float32)                # [T, out]
    matmul_rows(kind, data, out_dim, nb, row_bytes, np.ascontiguousarray(x, np.float32), y)
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
            table = np.array([_layout(l.dtype.name, l.shape)[:1] + (
                _address(d) - _address(base), l.shape[0]) + _layout(l.dtype.name, l.shape)[1:]
                for l, d in zip(linears, datas)], np.int64)
            splits = np.cumsum([l.shape[0] for l in linears])[:-1]
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
    xq, xd, xs = quantized_x(np.ascontiguousarray(x, np.float32))
    y = np.empty((x.shape[0], int(table[:, 2].sum())), np.float32)   # [T, sum out]
    matvec_group(table, base, xq, xd, xs, y)
    outs = np.split(y, splits, axis=1)
    for i, linear in enumerate(linears):
        if linear.bias is not None:
            outs[i] = outs[i] + linear.bias
    return outs


SUPPORTED = tuple(BLOCKS)

__all__ = ["numba_matmul", "numba_matmul_group", "matvec_group", "dequantize", "quantized_x", "matvec", "dequantize_rows",
           "DOT_MAX_TOKENS", "SUPPORTED"]
