"""numba CUDA kernels: quantized matvec/matmul for the block types of `block_table.BLOCKS`,
and attention over the KV cache (the registry kinds "matmul" and "attention").

A warp computes one matmul output `y[t, r]`: its 32 lanes take every 32nd block of row r
(neighbouring lanes read neighbouring blocks, so loads coalesce), decode them to float32
exactly as the numpy reference does, accumulate in float32 and meet in a tree reduction.
One thread computes one (token, head) row of attention. The thread code lives in
`cuda_threads`, shared with `cuda_emulated` (the same code compiled for the CPU); the
kernels here map the grid to it. With no GPU here, they are checked three ways: compiled
to PTX for sm_75 and assembled (tests/native/test_cuda_ptx.py), run by numba's simulator
(`NUMBA_ENABLE_CUDASIM=1`) on real tensors and a tiny model, bit-identical to the
emulation, and their thread code on whole real models through `cuda_emulated`.

Weights are copied to the device once, on first use, and cached by their host address.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from numba import cuda, float32

from . import cuda_threads
from ..blocks.block_table import BLOCKS

SUPPORTED = tuple(BLOCKS)
THREADS = 64                                   # attention: threads per CUDA block
WARP = cuda_threads.WARP
ROWS_PER_BLOCK = 4                             # matmul: warps (rows) per CUDA block
MATMUL_THREADS = ROWS_PER_BLOCK * WARP         # a literal for the shared array's size

_device = cuda_threads.compile_for(cuda.jit(device=True))
row_dot = _device.row_dot
attend = _device.attend


@cuda.jit
def _matmul_kernel(kind, w, rows, nb, row_bytes, x, y):
    """`y [T, rows]` = W `x [T, in]`; one warp per (row, token), ROWS_PER_BLOCK warps per
    CUDA block: grid (ceil(rows / ROWS_PER_BLOCK), T). The lanes' sums meet in a tree in
    shared memory (lane l adds lane l + 16, 8, 4, 2, 1), every thread of the block at
    every barrier (numba's simulator has no warp shuffles to check a shuffle tree with)."""
    sums = cuda.shared.array(MATMUL_THREADS, float32)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    r = cuda.blockIdx.x * ROWS_PER_BLOCK + tid // WARP
    t = cuda.blockIdx.y
    s = float32(0.0)
    if r < rows:
        s = row_dot(kind, w, r * row_bytes, nb, x, t, lane, WARP)
    sums[tid] = s
    cuda.syncthreads()
    offset = WARP // 2
    while offset > 0:
        if lane < offset:
            sums[tid] += sums[tid + offset]
        cuda.syncthreads()
        offset //= 2
    if lane == 0 and r < rows:
        y[t, r] = sums[tid]


# id(host array) -> (host array, device copy); holding the host array keeps its id unique.
_device_weights: Dict[int, Tuple[np.ndarray, object]] = {}


def _on_device(data: np.ndarray):
    found = _device_weights.get(id(data))
    if found is None or found[0] is not data:
        found = _device_weights[id(data)] = (data, cuda.to_device(data))
    return found[1]


def cuda_matmul(data: np.ndarray, dtype, shape: Tuple[int, int], x: np.ndarray,
                scratch_elements: int = 0) -> np.ndarray:
    """Kernel protocol for kind "matmul": `x [T, in]` -> `[T, out]` float32 on the GPU."""
    kind, block, size = BLOCKS[dtype.name]
    out_dim, in_dim = shape
    nb = in_dim // block
    y = cuda.device_array((x.shape[0], out_dim), np.float32)
    grid = ((out_dim + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK, x.shape[0])
    _matmul_kernel[grid, MATMUL_THREADS](
        kind, _on_device(data), out_dim, nb, nb * size,
        cuda.to_device(np.ascontiguousarray(x, np.float32)), y)
    return y.copy_to_host()


# --------------------------------------------------------------------------- attention

@cuda.jit
def _attention_kernel(q, k, v, n_keys, q_pos, scale, window, scores, out):
    """One thread per (token, head): grid (ceil(H / THREADS), T)."""
    h = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t = cuda.blockIdx.y
    if h < q.shape[1]:
        attend(q, k, v, n_keys, q_pos, scale, window, t, h, scores, out)


def cuda_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, n_keys: int,
                   q_pos: np.ndarray, scale: float, window: int) -> np.ndarray:
    """Kind "attention" (apr_core.model.fused): `q [T, H, hd]` over the first `n_keys`
    cached positions of `k_cache, v_cache [n_kv, cap, hd]` -> `[T, H * hd]` float32."""
    if k_cache.dtype == np.uint8:       # q8_0 / q4_0 KV rows: the numpy reference decodes
        from apr_core.model import fused
        return fused.cached_attention(q, k_cache, v_cache, n_keys, q_pos, scale, window)
    t_count, n_heads, hd = q.shape
    out = cuda.device_array((t_count, n_heads, hd), np.float32)
    scores = cuda.device_array((t_count * n_heads, max(1, n_keys)), np.float64)
    grid = ((n_heads + THREADS - 1) // THREADS, t_count)
    _attention_kernel[grid, THREADS](
        cuda.to_device(np.ascontiguousarray(q, np.float32)),
        cuda.to_device(np.ascontiguousarray(k_cache[:, :n_keys], np.float32)),
        cuda.to_device(np.ascontiguousarray(v_cache[:, :n_keys], np.float32)), int(n_keys),
        cuda.to_device(np.ascontiguousarray(q_pos, np.int64)), float(scale),
        int(window or 0), scores, out)
    return out.copy_to_host().reshape(t_count, n_heads * hd)


KERNELS = {"matmul": cuda_matmul, "attention": cuda_attention}

__all__ = ["cuda_matmul", "cuda_attention", "KERNELS", "SUPPORTED"]
