"""Compile numba's CPU kernels for a model in a background process, once per machine, so
that later runs load them from numba's cache in a fraction of a second.

    numba_warmup.start(model_path)    # -> True when this call started the job
    numba_warmup.running()            # a job is under way (its lock is fresh)

numba compiles a kernel on its first call: a cold cache costs ~2 minutes of one core on
SmolLM2 (measured 124 s alone), while the portable simd kernels build in seconds. A run
that finds the cache cold (`numba_cache.ready()` False) runs on the simd kernels and
starts this job, which loads the same model on numba with the engine's default options
and generates a few tokens (a prefill, then decode steps: every kernel a generation
calls), then marks the cache ready. One job at a time (`background.spawn_once`); it
lowers its priority so the run that started it keeps the cores, and refreshes its lock
while it lives, so a job that died is taken over within LOCK_STALE_S.

The job itself: `numba_warmup_job` (python -m apr_native.numba_warmup_job MODEL LOCK).
"""
from __future__ import annotations

import os

LOCK_STALE_S = 120           # a job's lock not refreshed for this long: the job died
HEARTBEAT_S = 15             # how often the job refreshes its lock


def lock_path() -> str:
    from .config import cache_dir
    return os.path.join(str(cache_dir()), "kernels", "numba-warmup")


def running() -> bool:
    """Whether a warm-up job is under way."""
    from .background import running as held
    return held(lock_path(), LOCK_STALE_S)


def start(model_path: str) -> bool:
    """Start the warm-up job for `model_path` unless one is running; True if started."""
    from .background import spawn_once
    return spawn_once(lock_path(), ["apr_native.numba_warmup_job",
                                    os.path.abspath(model_path)], LOCK_STALE_S)
