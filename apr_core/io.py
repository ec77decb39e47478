"""Byte sources: the only thing that differs between platforms (ARCHITECTURE §2).

A byte source answers `read(offset, length)` with exactly `length` bytes or raises
`AprError`; parsers never touch files directly, so inspecting a 100 GB file reads only the
ranges its header and index occupy. `bytes_read` counts what was actually read.

Asynchronous transports (a browser `fetch` with Range requests, IndexedDB) implement
`AsyncRangeReader` and drive the same synchronous parsers through `run_async`: a parser
running over a `SparseSource` raises `NeedBytes` for a range it lacks, the driver fetches it
and runs the (cheap) parse again.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator, List, Tuple, TypeVar

from .errors import AprError, ErrorCode

T = TypeVar("T")


class ByteSource:
    """Random-access bytes of known size. Subclasses implement `_read`."""

    name = "<bytes>"

    def __init__(self) -> None:
        self.bytes_read = 0

    @property
    def size(self) -> int:
        raise NotImplementedError

    def _read(self, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def read(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset`; E002 when the range leaves the source."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise AprError(ErrorCode.CORRUPT, "read beyond end of data (truncated file?)",
                           source=self.name, offset=offset, length=length, size=self.size)
        data = self._read(offset, length)
        if len(data) != length:
            raise AprError(ErrorCode.IO, "short read", source=self.name, offset=offset,
                           wanted=length, got=len(data))
        self.bytes_read += length
        return data

    def close(self) -> None:
        """Release the underlying resource (idempotent)."""

    def __enter__(self) -> "ByteSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesSource(ByteSource):
    """A source over `bytes`, `bytearray` or `memoryview` (no copy until `read`)."""

    def __init__(self, data: Any, name: str = "<bytes>") -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self.name = name

    @property
    def size(self) -> int:
        return len(self._view)

    def _read(self, offset: int, length: int) -> bytes:
        return bytes(self._view[offset:offset + length])


class FileSource(ByteSource):
    """A source over a file on disk, read with seek+read (no mmap: that is `apr_native`)."""

    def __init__(self, path: Any) -> None:
        super().__init__()
        self.name = os.fspath(path)
        try:
            self._file = open(self.name, "rb")
            self._size = os.fstat(self._file.fileno()).st_size
        except FileNotFoundError:
            raise AprError(ErrorCode.IO, "file not found", path=self.name)
        except IsADirectoryError:
            raise AprError(ErrorCode.IO, "is a directory, not a file", path=self.name)
        except OSError as exc:
            raise AprError(ErrorCode.IO, "cannot open file: {}".format(exc.strerror),
                           path=self.name)

    @property
    def size(self) -> int:
        return self._size

    def _read(self, offset: int, length: int) -> bytes:
        try:
            self._file.seek(offset)
            return self._file.read(length)
        except (OSError, ValueError) as exc:
            raise AprError(ErrorCode.IO, "read failed: {}".format(exc), path=self.name,
                           offset=offset)

    def close(self) -> None:
        self._file.close()


class WindowSource(ByteSource):
    """A sub-range `[start, start+length)` of another source, addressed from 0."""

    def __init__(self, base: ByteSource, start: int, length: int) -> None:
        super().__init__()
        if start < 0 or length < 0 or start + length > base.size:
            raise AprError(ErrorCode.CORRUPT, "window outside source", start=start,
                           length=length, size=base.size)
        self._base, self._start, self._length = base, start, length
        self.name = base.name

    @property
    def size(self) -> int:
        return self._length

    def _read(self, offset: int, length: int) -> bytes:
        return self._base.read(self._start + offset, length)


def open_source(source: Any) -> ByteSource:
    """Accept a ByteSource, bytes-like object or path and return a ByteSource."""
    if isinstance(source, ByteSource):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesSource(source)
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source)
    raise AprError(ErrorCode.ARGUMENT, "not a byte source, bytes or path",
                   type=type(source).__name__)


# ---------------------------------------------------------------------------------------
# Asynchronous transports (browser fetch, IndexedDB): drive sync parsers over fetched spans.

class NeedBytes(Exception):
    """Raised by `SparseSource` when a parser reads a range that has not been fetched."""

    def __init__(self, offset: int, length: int) -> None:
        super().__init__(offset, length)
        self.offset = offset
        self.length = length


class AsyncRangeReader:
    """What an asynchronous transport implements: total size and `await read(off, n)`."""

    size = 0
    name = "<async>"

    async def read(self, offset: int, length: int) -> bytes:  # pragma: no cover - protocol
        raise NotImplementedError


class SparseSource(ByteSource):
    """A source of known size holding only the spans fetched so far."""

    def __init__(self, size: int, name: str = "<sparse>") -> None:
        super().__init__()
        self._size = size
        self._spans: List[Tuple[int, bytes]] = []
        self.name = name

    @property
    def size(self) -> int:
        return self._size

    def add(self, offset: int, data: bytes) -> None:
        self._spans.append((offset, bytes(data)))

    def _read(self, offset: int, length: int) -> bytes:
        for start, data in self._spans:
            if start <= offset and offset + length <= start + len(data):
                return data[offset - start:offset - start + length]
        raise NeedBytes(offset, length)


async def run_async(reader: AsyncRangeReader, parse: Callable[[ByteSource], T],
                    min_fetch: int = 1 << 16, max_rounds: int = 10000) -> T:
    """Run the synchronous `parse(source)` against an async transport.

    Each missing range is fetched (at least `min_fetch` bytes, growing geometrically so
    a parser walking a large header needs few round trips) and the parse is retried.
    """
    sparse = SparseSource(reader.size, getattr(reader, "name", "<async>"))
    chunk = min_fetch
    for _ in range(max_rounds):
        try:
            return parse(sparse)
        except NeedBytes as need:
            length = min(max(need.length, chunk), reader.size - need.offset)
            sparse.add(need.offset, await reader.read(need.offset, length))
            chunk = min(chunk * 2, 1 << 26)
    raise AprError(ErrorCode.IO, "too many range requests while parsing", source=sparse.name)


class CountingSource(ByteSource):
    """Wraps a source and records every range read (for tests and `--verbose`)."""

    def __init__(self, base: ByteSource) -> None:
        super().__init__()
        self._base = base
        self.name = base.name
        self.ranges: List[Tuple[int, int]] = []

    @property
    def size(self) -> int:
        return self._base.size

    def _read(self, offset: int, length: int) -> bytes:
        self.ranges.append((offset, length))
        return self._base.read(offset, length)

    def close(self) -> None:
        self._base.close()


def read_all(source: ByteSource, chunk: int = 1 << 24) -> Iterator[bytes]:
    """Yield the whole source in chunks (for checksums) without holding it in memory."""
    offset = 0
    while offset < source.size:
        length = min(chunk, source.size - offset)
        yield source.read(offset, length)
        offset += length


__all__ = ["ByteSource", "BytesSource", "FileSource", "WindowSource", "open_source",
           "NeedBytes", "AsyncRangeReader", "SparseSource", "run_async", "CountingSource",
           "read_all"]
