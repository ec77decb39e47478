"""A machine's first `apr` start, reproduced: every kernel cache empty, and the background
warm-up job that start leaves behind ended afterwards. bench/startup.py times the cold
first run with it; tests/cli/test_first_run.py checks what that run says and does.

    env = cold_env(folder)                 # caches under `folder`, all empty
    ... run `apr` with env ...
    end_warmup_job(warmup_lock(folder))
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Dict, Mapping, Optional

# variables a user's shell may set that would keep a first run off its default path
_CLEARED = ("APR_QUIET", "APR_BACKEND", "APR_SIMD_BUILD")


def cold_env(root: Path, base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """`base` (the process's environment) with the simd library's cache and the warm-up's
    lock (APR_CACHE), numba's cache and zig's caches in empty folders under `root`."""
    root = Path(root)
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in _CLEARED}
    env.update(APR_CACHE=str(root / "apr"), NUMBA_CACHE_DIR=str(root / "numba"),
               ZIG_GLOBAL_CACHE_DIR=str(root / "zig"),
               ZIG_LOCAL_CACHE_DIR=str(root / "zig-local"), APR_CONFIG=os.devnull)
    return env


def warmup_lock(root: Path) -> Path:
    """The lock file of the numba warm-up job a cold start under `cold_env(root)` spawns."""
    return Path(root) / "apr" / "kernels" / "numba-warmup"


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_warmup_job(lock: Path, wait: float = 10.0) -> None:
    """End the job recorded in `lock`, if any (it leads its own process group; its starter
    has exited, so init reaps it)."""
    try:
        pid = int(Path(lock).read_text())
    except (OSError, ValueError):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)


__all__ = ["cold_env", "warmup_lock", "alive", "end_warmup_job"]
