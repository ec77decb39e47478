"""Giving an unloaded model's memory back (the many-model server, model_router.py).

Dropping the engine is not enough on its own: the numba backend caches each layer's
weight table under its projections' ids (`kernels.cpu.weight_table`), holding those
projections and so their views of the mmap'd file; while one view lives the mapping stays,
and its touched pages stay in RSS. `forget_weight_tables` drops the unloaded model's
entries (rebuilt on use if the model loads again); `release_memory` then collects the
cycles and trims glibc's heap so the freed pages leave RSS too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any, Set


def linear_ids(transformer: Any) -> Set[int]:
    """ids of the transformer's projections (every layer's, and its own)."""
    found = {id(l) for block in getattr(transformer, "blocks", ())
             for l in getattr(block, "linears", {}).values() if l is not None}
    found.update(id(l) for l in getattr(transformer, "linears", {}).values()
                 if l is not None)
    return found


def forget_weight_tables(serving_engine: Any) -> int:
    """Drop the weight tables the numba kernels cached for `serving_engine`'s model (after
    it stopped); how many were dropped."""
    engine = getattr(serving_engine, "engine", None)
    if engine is None:
        return 0
    try:
        from ..kernels import cpu
    except ImportError:         # numba is not installed: nothing was cached
        return 0
    ids = linear_ids(engine.transformer)
    stale = [key for key in list(cpu._tables) if ids.intersection(key)]
    for key in stale:
        cpu._tables.pop(key, None)
    return len(stale)


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


__all__ = ["forget_weight_tables", "linear_ids", "release_memory"]
