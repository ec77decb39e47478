"""apr_core's "matmul" and "matmul_group" kinds on the natively built block kernels
(`build.library()`: web/src/kernels/matmul_k.c), registered as backend "simd".

They are the browser's exact kernels (the activation split of `quantize_x`, exact integer
dots, the float32 steps matmul_k.c documents), reading every weight of llama.cpp's common
recipes (apr_core.quant.block_kinds) in place in the mapped file: no repacking, no float
copy, nothing compiled at load. Rows split over `threads` (ctypes calls release the GIL);
one token's matvecs run on the calling thread alone, where handing rows to another Python
thread costs more than it saves. Other weight types and the fused kinds take numpy's
kernels.
"""
from __future__ import annotations

import ctypes
import queue
import threading
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from apr_core.model.weights import GroupedMatmul
from apr_core.quant.block_kinds import BLOCK_KINDS, KIND_Q2_K

BACKEND = "simd"
BLOCK = 32
ACC_ALIGN = 64
# Below this many weight bytes times tokens a call stays on one thread (a matvec of a
# small model's layer takes tens of microseconds; waking a thread about as long).
SPLIT_MIN_WORK = 1 << 22

_INT, _PTR = ctypes.c_int, ctypes.c_void_p


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _row_share(rows: int, index: int, threads: int) -> Tuple[int, int]:
    """Rows [first, last) of thread `index` (kernel_jobs.js `rowShare`: groups of four)."""
    def edge(i: int) -> int:
        return rows if i >= threads else min(rows, rows * i // threads // 4 * 4)
    return edge(index), edge(index + 1)


class _Helpers:
    """Threads that run ctypes calls handed to them (the calling thread runs its share)."""

    def __init__(self, count: int) -> None:
        self.jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.done: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        for i in range(count):
            threading.Thread(target=self._loop, name="apr-simd-%d" % i, daemon=True).start()

    def _loop(self) -> None:
        while True:
            calls = self.jobs.get()
            try:
                for call in calls:
                    call[0](*call[1:])
                self.done.put(None)
            except BaseException as exc:    # reported to the caller, never lost
                self.done.put(exc)


class SimdMatmul(GroupedMatmul):
    """Registry kinds "matmul" and "matmul_group" (GroupedMatmul's, over `run`) on the
    native block kernels; one split of x serves every weight of a group."""

    def __init__(self, path: str, threads: int = 1) -> None:
        lib = ctypes.CDLL(path)
        self._quantize = lib.quantize_x
        self._quantize.argtypes = [_PTR, _INT, _INT, _PTR, _PTR]
        self._sums16 = lib.sums16
        self._sums16.argtypes = [_PTR, _INT, _INT, _PTR]
        self._matmul = lib.matmul_k
        self._matmul.argtypes = [_INT, _PTR, _PTR, _PTR, _PTR, _PTR, _PTR, _PTR,
                                 _INT, _INT, _INT, _INT, _INT]
        self.threads = max(1, threads)
        self._helpers: Optional[_Helpers] = None

    def usable(self, dtype: Any, shape: Tuple[int, int]) -> bool:
        return dtype.name in BLOCK_KINDS and shape[1] % BLOCK == 0

    def run(self, weights: Sequence[Tuple[Any, Any, Tuple[int, int]]], x: np.ndarray
            ) -> List[np.ndarray]:
        """`x [T, in]` times each `(data, dtype, (out, in))` weight -> `[T, out]` each."""
        x = np.ascontiguousarray(x, np.float32)                          # [T, in]
        tokens, cols = x.shape
        nb = cols // BLOCK
        xq = np.empty((tokens, nb, 2 * BLOCK), np.int16)                 # [T, nb, 64]
        sc = np.empty((tokens, nb, 2), np.float32)                       # [T, nb, 2]
        self._quantize(_address(x), nb, tokens, _address(xq), _address(sc))
        s16 = sc
        if any(BLOCK_KINDS[dtype.name] == KIND_Q2_K for _, dtype, _ in weights):
            s16 = np.empty((tokens, 2 * nb), np.float32)                 # [T, 2 nb]
            self._sums16(_address(x), 2 * nb, tokens, _address(s16))
        work = tokens * sum(np.asarray(data).nbytes for data, _, _ in weights)
        threads = self.threads if tokens > 1 and work >= SPLIT_MIN_WORK else 1
        acc_bytes = -(-tokens * 16 // ACC_ALIGN) * ACC_ALIGN
        scratch = np.empty(2 * threads * acc_bytes + ACC_ALIGN, np.uint8)
        base = -_address(scratch) % ACC_ALIGN + _address(scratch)        # 64-byte aligned
        outs, calls = [], [[] for _ in range(threads)]
        for data, dtype, (rows, _) in weights:
            blocks = np.ascontiguousarray(data).view(np.uint8)
            y = np.empty((tokens, rows), np.float32)                     # [T, out]
            outs.append((y, blocks))
            for index in range(threads):
                first, last = _row_share(rows, index, threads)
                acc = base + 2 * index * acc_bytes
                if first < last:
                    calls[index].append((self._matmul, BLOCK_KINDS[dtype.name], _address(blocks),
                                         _address(xq), _address(sc), _address(s16), _address(y),
                                         acc, acc + acc_bytes, rows, nb, tokens, first, last))
        self._run_calls(calls)
        return [y for y, _ in outs]

    def _run_calls(self, calls: List[List[Any]]) -> None:
        if len(calls) > 1:
            if self._helpers is None:
                self._helpers = _Helpers(self.threads - 1)
            for share in calls[1:]:
                self._helpers.jobs.put(share)
        for call in calls[0]:
            call[0](*call[1:])
        for _ in calls[1:]:
            failed = self._helpers.done.get()
            if failed is not None:
                raise failed
