"""numba's CPU kernels with a thread count of one engine's own.

    kernels = backends.select("numba", threads=1)     # a NumbaKernels: its own pool
    kernels.threads, len(kernels.pool.threads) + 1    # 1, 1 (the calling thread included)

numba's kernels split their work over `apr_native.kernels.pool`: worker threads and ONE
task descriptor they share. Every kernel asks `pool.get()` for the pool to post its tasks
to; by default that is the process's pool, sized once (APR_THREADS, else every core) and
shared by every engine that did not ask for a thread count. A `NumbaKernels` (an engine
whose `EngineOptions.threads` is set) owns a pool of that many threads: each kernel it
hands out runs with that pool bound to the calling thread (`pool.bind`: `pool.get()`
answers it there, so two engines on two threads each reach their own), and under the
kernels' lock (a pool runs one task at a time; kernels of one engine called from two
threads take turns instead of sharing the descriptor). numba's own thread count
(`numba.set_num_threads`) is left alone: the registered kernels never use numba's
parallel regions. The pool's threads stop when the kernels object is collected (or at
exit).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict

from apr_core.errors import AprError, ErrorCode
from apr_core.quant import registry


def _on_pool(kernel: Callable[..., Any], owner: "NumbaKernels") -> Callable[..., Any]:
    """`kernel` run on `owner`'s pool, one call at a time."""
    from .kernels import pool
    workers, lock = owner.pool, owner.lock

    def on_pool(*args: Any, **kwargs: Any) -> Any:
        with lock:
            outer = pool.bind(workers)                # a kernel inside a kernel: restored
            try:
                return kernel(*args, **kwargs)
            finally:
                pool.bind(outer)
    on_pool.__wrapped__ = kernel              # type: ignore[attr-defined]
    return on_pool


class NumbaKernels(registry.Kernels):
    """Backend "numba" on `threads` threads of its own (the caller's included)."""

    def __init__(self, threads: int, uniform_rows: int = 1) -> None:
        super().__init__("numba", uniform_rows)
        if threads < 1:
            raise AprError(ErrorCode.ARGUMENT, "threads must be at least 1", threads=threads)
        from .kernels import pool
        self.threads = threads
        # started now: the workers load their code while the model loads
        self.pool = pool.Pool(threads - 1, wait=False)
        self.lock = threading.RLock()
        self._bound: Dict[Callable[..., Any], Callable[..., Any]] = {}
        weakref.finalize(self, self.pool.stop)

    def lookup(self, kind: str, dtype_name: str) -> registry.Kernel:
        kernel = super().lookup(kind, dtype_name)
        bound = self._bound.get(kernel)
        if bound is None:
            bound = self._bound[kernel] = _on_pool(kernel, self)
        return bound

    def __repr__(self) -> str:
        return "<NumbaKernels {} threads>".format(self.threads)


__all__ = ["NumbaKernels"]
