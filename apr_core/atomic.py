"""Atomic file output: write to a temporary file beside the target, then rename.

A failure at any point (an exception, a full disk) removes the temporary file, so the
target either keeps its old content or does not exist; it is never half-written.

A writer that is killed (SIGKILL, power loss) cannot remove its temporary file, so each
one is named after its writer: `.apr-<pid>-<start>-<random>.tmp`, where `start` is when
that process started (Linux `/proc/<pid>/stat`, 0 where unknown). Before writing, every
writer removes the temporary files in its directory whose writer is gone: no process
with that pid, or a process with that pid that started at another time (the pid was
reused). A live writer's file is never touched. Files of the older `.apr-XXXXXXXX.tmp`
form (no writer recorded) are removed once untouched for `LEGACY_STALE_S`. What was freed
is reported through the `apr.atomic` logger (and returned by `sweep_stale`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from typing import IO, Any, Iterator, Optional, Tuple

from .errors import AprError, ErrorCode

LOGGER = "apr.atomic"       # (logging is imported only to warn: not at every start)
PREFIX = ".apr-"
SUFFIX = ".tmp"
LEGACY_STALE_S = 3600.0
_OURS = re.compile(r"\.apr-(\d+)-(\d+)-[A-Za-z0-9_]+\.tmp\Z")
_LEGACY = re.compile(r"\.apr-[A-Za-z0-9_]{6,}\.tmp\Z")
_start_ticks: Optional[int] = None


def process_start(pid: int) -> int:
    """When process `pid` started, in clock ticks since boot (Linux); 0 where unknown,
    -1 when there is no such process."""
    try:
        with open("/proc/{}/stat".format(pid), "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except FileNotFoundError:
        return -1 if os.path.isdir("/proc/self") else _alive_or_unknown(pid)
    except (OSError, ValueError, IndexError):
        return _alive_or_unknown(pid)


def _alive_or_unknown(pid: int) -> int:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return -1
    except (OSError, AttributeError):      # no permission (alive), or no os.kill at all
        return 0
    return 0


def _own_tag() -> str:
    global _start_ticks
    if _start_ticks is None:
        _start_ticks = max(process_start(os.getpid()), 0)
    return "{}{}-{}-".format(PREFIX, os.getpid(), _start_ticks)


def is_stale(name: str, path: str, now: Optional[float] = None) -> bool:
    """Whether `name` (in its directory at `path`) is a temporary file of a dead writer."""
    match = _OURS.match(name)
    if match:
        pid, start = int(match.group(1)), int(match.group(2))
        if pid == os.getpid():
            return False
        running = process_start(pid)
        return running == -1 or (running > 0 and start > 0 and running != start)
    if _LEGACY.match(name):
        try:
            age = (now or time.time()) - os.stat(path).st_mtime
        except OSError:
            return False
        return age > LEGACY_STALE_S
    return False


def sweep_stale(directory: Any) -> Tuple[int, int]:
    """Remove the stale temporary files of dead writers in `directory`: (files, bytes)."""
    directory = os.fspath(directory) or "."
    try:
        names = [n for n in os.listdir(directory)
                 if n.startswith(PREFIX) and n.endswith(SUFFIX)]
    except OSError:
        return 0, 0
    removed = freed = 0
    now = time.time()
    for name in names:
        path = os.path.join(directory, name)
        if not is_stale(name, path, now):
            continue
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except OSError:
            continue                # gone already, or not ours to remove
        removed += 1
        freed += size
    if removed:
        import logging
        logging.getLogger(LOGGER).warning(
            "apr: removed %d stale temporary file%s of interrupted writes in %s (freed %s)",
            removed, "" if removed == 1 else "s", directory, _human(freed))
    return removed, freed


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return "{:.1f} {}".format(value, unit) if unit != "B" else "{} B".format(size)
        value /= 1024
    return "{} B".format(size)


@contextlib.contextmanager
def atomic_output(path: Any, overwrite: bool = True) -> Iterator[IO[bytes]]:
    """Yield a binary file opened for writing+reading; on success it becomes `path`."""
    target = os.fspath(path)
    if not overwrite and os.path.exists(target):
        raise AprError(ErrorCode.ARGUMENT, "output exists (use --force to overwrite)",
                       path=target)
    directory = os.path.dirname(os.path.abspath(target))
    sweep_stale(directory)
    import tempfile         # (with random: only when a file is written, not at every start)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_own_tag(), suffix=SUFFIX, dir=directory)
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot create output: {}".format(exc.strerror),
                       path=target)
    try:
        with os.fdopen(fd, "w+b") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _remove_quietly(tmp)
        message = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise AprError(ErrorCode.IO, "write failed: {}".format(message), path=target)
    except BaseException:
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
