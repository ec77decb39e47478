"""One-at-a-time background jobs that outlive the process starting them (the simd library's
build, numba's kernel warm-up): the next start finds their result in the cache.

    spawn_once(lock, ["apr_native.simd.build"], stale_after=300)

A lock file marks a running job: a start while it is younger than `stale_after` seconds
spawns nothing (one compiler at a time on a small machine, not one per process), an older
one belongs to a job that died and is taken over. The job gets the lock's path as its
last argument and removes it when it ends (`release`); a job that may outlive
`stale_after` keeps its lock fresh (`heartbeat`). The lock holds the job's process id
(its process group's too: the job leads a session of its own).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Sequence

# apr_native's parent folder: the job imports the same apr_native as its starter.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def running(lock: str, stale_after: float) -> bool:
    """Whether a job holding `lock` started less than `stale_after` seconds ago."""
    try:
        return time.time() - os.path.getmtime(lock) < stale_after
    except OSError:
        return False


def spawn_once(lock: str, module_args: Sequence[str], stale_after: float) -> bool:
    """Start `python -m MODULE ARGS... LOCK` detached (no stdin/stdout/stderr, its own
    session), unless a job holding `lock` is running; True when this call started it."""
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    if running(lock, stale_after):
        return False
    try:
        os.unlink(lock)                         # a job that died: take over
    except OSError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False                            # another process got there first
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_PACKAGE_ROOT] + sys.path))
    job = subprocess.Popen([sys.executable, "-m", *module_args, lock],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:                                        # never re-creating a lock already released
        handle = os.open(lock, os.O_WRONLY)
    except OSError:
        return True
    try:
        os.write(handle, str(job.pid).encode())
    finally:
        os.close(handle)
    return True


def heartbeat(lock: str, every: float) -> None:
    """Refresh `lock`'s time every `every` seconds while this process lives (a daemon
    thread: a long compile holds the GIL only in short turns)."""
    def beat() -> None:
        while True:
            try:
                os.utime(lock)
            except OSError:
                return                          # released
            time.sleep(every)
    threading.Thread(target=beat, name="apr-lock-heartbeat", daemon=True).start()


def release(lock: str) -> None:
    """The job's last step: its lock goes, so the next start may spawn again."""
    try:
        os.unlink(lock)
    except OSError:
        pass


__all__ = ["spawn_once", "running", "heartbeat", "release"]
