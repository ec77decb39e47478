"""Lazy GGUF metadata arrays: the raw bytes are kept, values are decoded on first access.

A GGUF header of a 150k-token vocabulary holds two arrays of ~150k strings (tokens and
merges) and two of ~150k numbers (token types, scores). The reader walks their string
lengths without decoding them (`Cursor.skip_strings`) and keeps each array as a
`GGUFArray` over its raw bytes, like gguf-py's memmap views, so `apr inspect` touches
only what it shows. `GGUFFile.metadata` turns them into plain lists the first time it is
read (every consumer that needs values gets lists); `GGUFFile.header_metadata` leaves them
lazy for header-only readers. Standard library only.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Iterator, List, Optional

from collections.abc import Sequence

_U64 = struct.Struct("<Q")
CHECKPOINT = 1024           # one string offset remembered per this many strings


class GGUFArray(Sequence):
    """A GGUF array of `count` strings (spec "str") or fixed-size scalars (a struct code),
    held as its raw little-endian bytes. `len()` and `spec` need no decoding; one item of a
    string array walks the lengths to it; iteration, slices, `==` and `list()` decode all
    values once (then cached)."""

    __slots__ = ("raw", "count", "code", "_values", "_checkpoints")

    def __init__(self, raw: bytes, count: int, code: Optional[str],
                 checkpoints: Optional[List[int]] = None) -> None:
        self.raw = raw
        self.count = count
        self.code = code                  # None = strings
        self._values: Optional[List[Any]] = None
        # offset of string i * CHECKPOINT, i = 0, 1, ... (the reader's walk records them)
        self._checkpoints: Optional[List[int]] = checkpoints or None

    def __len__(self) -> int:
        return self.count

    def values(self) -> List[Any]:
        """All values as a new list (decoded once, then cached)."""
        if self._values is None:
            self._values = self._decode_all()
        return list(self._values)

    def _decode_all(self) -> List[Any]:
        raw = self.raw
        if self.code is not None:
            return list(struct.unpack("<{}{}".format(self.count, self.code), raw))
        unpack = _U64.unpack_from
        pieces = []
        append = pieces.append
        pos = 0
        for _ in range(self.count):
            end = pos + 8 + unpack(raw, pos)[0]
            append(raw[pos + 8:end])
            pos = end
        # One decode of the strings joined by NUL, split again: a vocabulary's ~150k
        # strings decoded one by one cost ~0.1 s of every start. UTF-8 never puts a NUL
        # byte inside a character, so the split gives back each string exactly, unless a
        # string holds a NUL itself: then they are decoded one by one.
        joined = b"\0".join(pieces)
        if joined.count(b"\0") == len(pieces) - 1 or not pieces:
            out = joined.decode("utf-8", "surrogateescape").split("\0") if pieces else []
            if len(out) == len(pieces):
                return out
        return [piece.decode("utf-8", "surrogateescape") for piece in pieces]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.values()[index]
        if self._values is not None:
            return self._values[index]
        index = range(self.count)[index]          # IndexError / negative indices as list
        if self.code is not None:
            size = struct.calcsize("<" + self.code)
            return struct.unpack_from("<" + self.code, self.raw, index * size)[0]
        pos = self._offset(index)
        end = pos + 8 + _U64.unpack_from(self.raw, pos)[0]
        return self.raw[pos + 8:end].decode("utf-8", "surrogateescape")

    def _offset(self, index: int) -> int:
        """Byte offset of string `index`: from the nearest remembered offset, walking."""
        unpack = _U64.unpack_from
        raw = self.raw
        if index < CHECKPOINT:          # the first items: walk from the start
            pos = 0
            for _ in range(index):
                pos += 8 + unpack(raw, pos)[0]
            return pos
        if self._checkpoints is None:
            marks = []
            pos = 0
            for start in range(0, self.count, CHECKPOINT):
                marks.append(pos)
                for _ in range(min(CHECKPOINT, self.count - start)):
                    pos += 8 + unpack(raw, pos)[0]
            self._checkpoints = marks
        pos = self._checkpoints[index // CHECKPOINT]
        for _ in range(index % CHECKPOINT):
            pos += 8 + unpack(raw, pos)[0]
        return pos

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, GGUFArray):
            return self.values() == other.values()
        if isinstance(other, (list, tuple)):
            return self.values() == list(other)
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore  # mutable-like, as a list

    def __repr__(self) -> str:
        return "GGUFArray({} {})".format(self.count, "str" if self.code is None else self.code)


def materialize(table: Dict[str, Any]) -> None:
    """Replace every GGUFArray value of `table` by a plain list, in place."""
    for key, value in table.items():
        if isinstance(value, GGUFArray):
            table[key] = value.values()


def plain(value: Any) -> Any:
    """`value` with GGUFArrays (at any depth of lists/dicts) as lists: what JSON needs."""
    if isinstance(value, GGUFArray):
        return value.values()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


__all__ = ["GGUFArray", "materialize", "plain"]
