"""The CUDA kernels' thread code (`cuda_threads`) compiled for the CPU and run over the
kernels' grid: the "cuda" backend with `APR_CUDA_EMULATE=1`.

Without a GPU, numba's simulator is the usual stand-in, but it interprets every thread in
Python: a token of a 135M-parameter model takes minutes. Compiled, the same per-thread
code decodes whole real models, so the backend's greedy tokens can be checked against
numpy's on them. What emulation leaves out -- the kernels' index arithmetic and device
transfers -- the simulator covers on real tensors (tests/native/test_cuda_sim.py), and PTX
compilation covers the GPU target. For checking, not speed: it is scalar code.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
from numba import njit, prange

from . import cuda_threads
from ..blocks.block_table import BLOCKS

SUPPORTED = tuple(BLOCKS)

WARP = cuda_threads.WARP

_cpu = cuda_threads.compile_for(njit)
row_dot = _cpu.row_dot
attend = _cpu.attend
warp_tree_sum = _cpu.warp_tree_sum


@njit(parallel=True)
def _matmul_grid(kind, w, rows, nb, row_bytes, x, y):
    """`_matmul_kernel`'s grid: the warp of every (row r, token t), its lanes' sums met in
    the order of the kernel's reduction tree."""
    for r in prange(rows):
        lanes = np.empty(WARP, np.float32)
        for t in range(x.shape[0]):
            for lane in range(WARP):
                lanes[lane] = row_dot(kind, w, r * row_bytes, nb, x, t, lane, WARP)
            y[t, r] = warp_tree_sum(lanes)


@njit(parallel=True)
def _attention_grid(q, k, v, n_keys, q_pos, scale, window, scores, out):
    """`_attention_kernel`'s grid: every (token t, head h) thread."""
    n_heads = q.shape[1]
    for th in prange(q.shape[0] * n_heads):
        attend(q, k, v, n_keys, q_pos, scale, window, th // n_heads, th % n_heads, scores,
               out)


def emulated_matmul(data: np.ndarray, dtype, shape: Tuple[int, int], x: np.ndarray,
                    scratch_elements: int = 0) -> np.ndarray:
    """`cuda.cuda_matmul` on the CPU: `x [T, in]` -> `[T, out]` float32."""
    kind, block, size = BLOCKS[dtype.name]
    out_dim, in_dim = shape
    nb = in_dim // block
    y = np.empty((x.shape[0], out_dim), np.float32)                 # [T, out]
    _matmul_grid(kind, np.ascontiguousarray(data).reshape(-1), out_dim, nb, nb * size,
                 np.ascontiguousarray(x, np.float32), y)
    return y


def emulated_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
                       n_keys: int, q_pos: np.ndarray, scale: float, window: int
                       ) -> np.ndarray:
    """`cuda.cuda_attention` on the CPU -> `[T, H * hd]` float32."""
    if k_cache.dtype == np.uint8:       # q8_0 / q4_0 KV rows: the numpy reference decodes
        from apr_core.model import fused
        return fused.cached_attention(q, k_cache, v_cache, n_keys, q_pos, scale, window)
    t_count, n_heads, hd = q.shape
    out = np.empty((t_count, n_heads, hd), np.float32)              # [T, H, hd]
    scores = np.empty((t_count * n_heads, max(1, n_keys)), np.float64)
    _attention_grid(np.ascontiguousarray(q, np.float32),
                    np.ascontiguousarray(k_cache[:, :n_keys], np.float32),
                    np.ascontiguousarray(v_cache[:, :n_keys], np.float32), int(n_keys),
                    np.ascontiguousarray(q_pos, np.int64), float(scale), int(window or 0),
                    scores, out)
    return out.reshape(t_count, n_heads * hd)


KERNELS = {"matmul": emulated_matmul, "attention": emulated_attention}

__all__ = ["emulated_matmul", "emulated_attention", "KERNELS", "SUPPORTED"]
