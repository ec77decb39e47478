"""The GGUF header's bounded, read-ahead cursor over a ByteSource (see `Cursor`).

Split from `gguf_values` (the value types and their encoding), which reads through it.
"""
from __future__ import annotations

import struct
from typing import List, Tuple

from ..errors import AprError, ErrorCode
from ..io import ByteSource

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_LENGTH = 8             # a string's u64 length prefix
# Read-ahead stays within bytes already proven to belong to the header (see Cursor).
_CHUNK = 1 << 20


class Cursor:
    """Sequential reader over a ByteSource for the GGUF header, bounded and lazy.

    It never reads past a *floor*: a lower bound on where the header ends, raised as counts
    and lengths are parsed (`promise`). Read-ahead up to the floor makes parsing a large
    vocabulary a few big reads instead of hundreds of thousands of small ones, yet no byte
    of tensor data is ever touched. `limit` caps the header size (E008), independently of
    the file size (E002 when a count or length claims more bytes than the file has).
    """

    def __init__(self, source: ByteSource, limit: int) -> None:
        self.source = source
        self.size = source.size
        self.limit = limit
        self.pos = 0
        self.floor = 0
        self._buf = b""
        self._buf_start = 0

    def _check_end(self, end: int, what: str) -> None:
        if end > self.size:
            raise AprError(ErrorCode.CORRUPT, "GGUF header ends early (truncated or corrupt)",
                           needed=what, offset=self.pos, end=end, size=self.size,
                           source=self.source.name)
        if end > self.limit:
            raise AprError(ErrorCode.MEMORY, "GGUF header exceeds the size limit",
                           needed=what, end=end, limit=self.limit, source=self.source.name)

    def promise(self, nbytes: int, what: str) -> None:
        """Assert that `nbytes` bytes from here belong to the header (validated, no read)."""
        end = self.pos + nbytes
        self._check_end(end, what)
        if end > self.floor:
            self.floor = end

    def _fill(self, end: int, what: str, anchor: int) -> None:
        """Make the buffer hold [anchor, end) (anchor <= pos), reading ahead to the floor."""
        self._check_end(end, what)
        buf_end = self._buf_start + len(self._buf)
        if end > buf_end:   # keep [anchor, buf_end), read on from buf_end
            want = max(end, min(self.floor, self.pos + _CHUNK))
            keep = self._buf[anchor - self._buf_start:]
            self._buf = keep + self.source.read(buf_end, want - buf_end)
            self._buf_start = anchor

    def take(self, nbytes: int, what: str) -> bytes:
        end = self.pos + nbytes
        self._fill(end, what, self.pos)
        start = self.pos - self._buf_start
        self.pos = end
        return self._buf[start:start + nbytes]

    def skip_strings(self, count: int, after: int, what: str,
                     every: int = 0) -> Tuple[bytes, List[int]]:
        """Walk `count` length-prefixed strings without decoding them (`after` = bytes known
        to follow them) and return their raw bytes, with the offset (into those bytes) of
        every `every`-th string when `every` > 0, so one item can be found later without a
        second walk: lengths are bounded like `string`."""
        unpack = _U64.unpack_from
        pieces: List[bytes] = []
        marks: List[int] = []
        start = seg = self.pos               # bytes from `seg` on are not in `pieces` yet
        done = 0
        while True:
            self.promise((count - done) * _LENGTH + after, what)   # the lengths left
            need = self.pos + (_LENGTH if done < count else 0)
            buf_end = self._buf_start + len(self._buf)
            if need > buf_end:               # save what is walked, then refill (no re-copy)
                anchor = min(self.pos, buf_end)
                pieces.append(self._buf[seg - self._buf_start:anchor - self._buf_start])
                seg = anchor
                self._fill(need, what, anchor)
            if done == count:
                break
            buf, base = self._buf, self._buf_start
            rel = self.pos - base
            index = done
            try:
                while index < count:
                    stop = count
                    if every:                # a mark where a run of `every` strings begins
                        if index % every == 0 and len(marks) == index // every:
                            marks.append(base + rel - start)
                        stop = min(count, index - index % every + every)
                    for index in range(index, stop):
                        rel += 8 + unpack(buf, rel)[0]   # struct.error once past the buffer
                    index = stop
            except struct.error:
                pass
            self.promise(base + rel - self.pos, what)    # E002/E008 for a hostile length
            self.pos = base + rel
            done = index
        pieces.append(self._buf[seg - self._buf_start:self.pos - self._buf_start])
        return b"".join(pieces), marks

    def u32(self, what: str) -> int:
        return _U32.unpack(self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack(self.take(8, what))[0]

    def string(self, what: str, after: int = 0) -> bytes:
        """A length-prefixed string; `after` = bytes known to follow it (for read-ahead)."""
        length = self.u64(what)
        self.promise(length + after, what)
        return self.take(length, what)
