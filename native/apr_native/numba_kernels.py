"""numba's CPU kernels with a thread count of one engine's own.

    kernels = backends.select("numba", threads=1)     # a NumbaKernels: its own pool
    kernels.threads, len(kernels.pool.threads) + 1    # 1, 1 (the calling thread included)

numba's kernels split their work over `apr_native.kernels.pool`: worker threads and ONE
task descriptor they share. Every kernel asks `pool.get()` for the pool to post its tasks
to; by default that is the process's pool, sized once (APR_THREADS, else every core) and
shared by every engine that did not ask for a thread count. A `NumbaKernels` (an engine
whose `EngineOptions.threads` is set) owns a pool of that many threads: each kernel it
hands out runs with `pool.get()` answering that pool on the calling thread (a
thread-local, so two engines on two threads each reach their own), and under the
kernels' lock (a pool runs one task at a time; kernels of one engine called from two
threads take turns instead of sharing the descriptor). numba's own thread count
(`numba.set_num_threads`) is left alone: the registered kernels never use numba's
parallel regions. The pool's threads stop when the kernels object is collected (or at
exit).

The hook is installed over `pool.get` from here, once, because the kernels package's
sources are the key of numba's on-disk cache (`numba_cache.package_stamp`): any edit
there recompiles every kernel (minutes). The next change of that package should move
the thread-local lookup into `pool.get` itself and drop `_install`.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.quant import registry

_local = threading.local()          # .pool: the pool of the kernel running on this thread
_install_lock = threading.Lock()
_process_pool: Optional[Callable[[], Any]] = None     # the kernels package's own pool.get


def _current_pool() -> Any:
    """`pool.get` once installed: the pool of the NumbaKernels whose kernel runs on this
    thread, else the process's pool."""
    mine = getattr(_local, "pool", None)
    if mine is None:
        return _process_pool()
    mine.wait_started()
    return mine


def _install() -> None:
    global _process_pool
    from .kernels import pool
    with _install_lock:
        if _process_pool is None:
            _process_pool = pool.get
            pool.get = _current_pool


def _on_pool(kernel: Callable[..., Any], owner: "NumbaKernels") -> Callable[..., Any]:
    """`kernel` run on `owner`'s pool, one call at a time."""
    workers, lock = owner.pool, owner.lock

    def on_pool(*args: Any, **kwargs: Any) -> Any:
        with lock:
            outer = getattr(_local, "pool", None)     # a kernel inside a kernel: restored
            _local.pool = workers
            try:
                return kernel(*args, **kwargs)
            finally:
                _local.pool = outer
    on_pool.__wrapped__ = kernel              # type: ignore[attr-defined]
    return on_pool


class NumbaKernels(registry.Kernels):
    """Backend "numba" on `threads` threads of its own (the caller's included)."""

    def __init__(self, threads: int, uniform_rows: int = 1) -> None:
        super().__init__("numba", uniform_rows)
        if threads < 1:
            raise AprError(ErrorCode.ARGUMENT, "threads must be at least 1", threads=threads)
        from .kernels import pool
        _install()
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
