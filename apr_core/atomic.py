"""Atomic file output: write to a temporary file beside the target, then rename.

A failure at any point (an exception, a full disk) removes the temporary file, so the
target either keeps its old content or does not exist; it is never half-written.
"""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from typing import IO, Any, Iterator

from .errors import AprError, ErrorCode


@contextlib.contextmanager
def atomic_output(path: Any, overwrite: bool = True) -> Iterator[IO[bytes]]:
    """Yield a binary file opened for writing+reading; on success it becomes `path`."""
    target = os.fspath(path)
    if not overwrite and os.path.exists(target):
        raise AprError(ErrorCode.ARGUMENT, "output exists (use --force to overwrite)",
                       path=target)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".apr-", suffix=".tmp", dir=directory)
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
