"""How many threads numpy's BLAS (OpenBLAS) uses, changed at run time.

    with blas_threads.limited(1):      # tiny products: a second BLAS thread only waits
        y = x @ w.T

On this 2-core machine OpenBLAS's second thread waits to be scheduled on every small
product (1 x 512 @ 512 x 2048: 0.09 ms on one thread, 3.9 ms on two), so Whisper's decoder
steps run with one BLAS thread while the encoder's large products keep them all.

The library is found the way threadpoolctl finds it (not installed here): among the
shared objects this process has loaded (/proc/self/maps), the one whose name says
openblas, and its `*set_num_threads*` entry point under the names numpy's wheels
(scipy-openblas, 64-bit ints) and distributions use. Where there is no OpenBLAS (another
BLAS, another OS) `limited` does nothing: results are the same, only the speed differs.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Iterator, Optional, Tuple

# (set, get) symbol pairs: numpy's scipy-openblas wheels, then a system OpenBLAS
_SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"))

_lock = threading.Lock()
_api: Optional[Tuple[object, object]] = None
_searched = False


def _loaded_libraries() -> Iterator[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return iter(())
    return iter(sorted(p for p in paths if p.startswith("/")))


def _find() -> Optional[Tuple[object, object]]:
    """(set_num_threads, get_num_threads) of the loaded OpenBLAS, or None."""
    global _api, _searched
    if not _searched:
        import numpy  # noqa: F401  -- loads numpy's BLAS first
        for path in _loaded_libraries():
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for set_name, get_name in _SYMBOLS:
                setter = getattr(library, set_name, None)
                getter = getattr(library, get_name, None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    _api = (setter, getter)
                    break
            if _api is not None:
                break
        _searched = True
    return _api


def available() -> bool:
    """True when the thread count of numpy's BLAS can be changed here."""
    return _find() is not None


def current() -> Optional[int]:
    """BLAS threads now (None when unknown)."""
    api = _find()
    return int(api[1]()) if api is not None else None


@contextlib.contextmanager
def limited(threads: int) -> Iterator[None]:
    """Run the block with at most `threads` BLAS threads, then restore the count.

    The count is process-wide in OpenBLAS: the lock keeps two threads from interleaving
    their changes (the speech server runs transcriptions on one worker thread anyway)."""
    api = _find()
    if api is None:
        yield
        return
    setter, getter = api
    with _lock:
        before = int(getter())
        if before > threads:
            setter(threads)
    try:
        yield
    finally:
        if before > threads:
            with _lock:
                setter(before)


__all__ = ["available", "current", "limited"]
