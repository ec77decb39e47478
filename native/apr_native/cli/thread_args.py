"""`-t/--threads N` (llama.cpp's flag) for the commands that run a model in this process
(run, chat, serve, eval, qa, trace, tui): the CPU threads of every kernel backend, the
same as $APR_THREADS (numba's worker pool, the simd library's rows, BLAS). Set before any
backend starts (`apply`, called by the CLI's dispatcher for every command), so one value
reaches all of them."""
from __future__ import annotations

import argparse
import os
from typing import Optional

from apr_core.runtime.option_ranges import Range

from .arg_parser import typed

# the variable every backend reads its thread count from (apr_native.backends.THREADS_ENV)
THREADS_ENV = "APR_THREADS"
THREADS = Range(1, 1024)


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--threads", type=typed(int, THREADS), default=None, metavar="N",
                   help="CPU threads for the kernels (default: $APR_THREADS, else every "
                   "core this process may run on; {})".format(THREADS))


def apply(args: argparse.Namespace) -> None:
    """Make a command's `--threads` the process's thread count (before a backend reads
    it; bench and profile, whose --threads predate this flag, mean the same by theirs)."""
    threads = getattr(args, "threads", None)
    if threads is not None:
        os.environ[THREADS_ENV] = str(threads)


def in_use(backend: str) -> Optional[int]:
    """The numba pool's threads (the caller's included); None for the other backends,
    whose BLAS, library or device sizes its own."""
    if backend != "numba":
        return None
    from ..kernels import pool
    return len(pool.get().threads) + 1


__all__ = ["add_argument", "apply", "in_use", "THREADS_ENV"]
