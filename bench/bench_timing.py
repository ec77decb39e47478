"""Timing shared by the benchmark scripts."""
from __future__ import annotations

import time
from typing import Callable, List, Optional


def best_seconds(fns: List[Optional[Callable[[], object]]], repeat: int) -> List[Optional[float]]:
    """Best CPU time of each function; runs alternate so load changes hit all alike.

    CPU time (`process_time`, which counts page faults too) rather than wall time: both
    sides are single-threaded, and on a shared machine waiting for a core is not work.
    """
    best: List[Optional[float]] = [None if fn is None else float("inf") for fn in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            if fn is None:
                continue
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)  # type: ignore[type-var]
    return best
