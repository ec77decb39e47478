"""Giving an unloaded model's memory back (the many-model server, model_router.py).

Dropping the engine frees its projections and their views of the mmap'd file (the numba
backend's weight tables go with the projections, `kernels.cpu.weight_table`);
`release_memory` then collects the cycles and trims glibc's heap so the freed pages leave
RSS too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc


def release_memory() -> None:
    """Collect the unloaded model's cycles and hand freed heap pages back to the system
    (glibc keeps them otherwise, and RSS would not fall)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):      # not glibc
            pass


__all__ = ["release_memory"]
