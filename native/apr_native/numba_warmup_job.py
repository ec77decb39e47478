"""numba's kernel warm-up job (started by `numba_warmup.start`, one at a time):

    python -m apr_native.numba_warmup_job MODEL LOCK

It loads MODEL on numba's kernels with the engine's default options, generates a few
tokens (a prefill, then decode steps: every kernel a generation calls compiles into
numba's on-disk cache), marks the cache ready (`numba_cache.mark_ready`) and releases
LOCK, which it keeps fresh meanwhile. It runs at a lower priority, so the portable run
that started it keeps the cores.
"""
from __future__ import annotations

import os
import sys
from typing import List

from .numba_warmup import HEARTBEAT_S

NICE = 10
WARMUP_TOKENS = 4            # decode steps after the prefill


def warm_up(model_path: str) -> None:
    """Generate a few tokens of `model_path` on numba's kernels (compiling whatever the
    cache lacks), then mark the cache ready."""
    from apr_core.runtime.engine import Engine, EngineOptions
    from . import backends, numba_cache
    from .mmap_source import open_mmap
    options = EngineOptions(backend="numba")
    engine = Engine.open(model_path, options, backends.select("numba"), open_mmap)
    engine.generate(engine.model.prompt_ids("Hello"), max_tokens=WARMUP_TOKENS,
                    ignore_eos=True)
    numba_cache.mark_ready()


def main(argv: List[str]) -> int:
    from .background import heartbeat, release
    model_path, lock = argv
    if hasattr(os, "nice"):
        os.nice(NICE)
    heartbeat(lock, HEARTBEAT_S)
    try:
        warm_up(model_path)
    finally:
        release(lock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
