"""A small MessagePack codec (stdlib only) for APR v1 metadata (seed 003 §4).

`unpackb(data)` decodes exactly one object and refuses anything malformed with AprError:
truncation (E002), reserved byte 0xC1, invalid UTF-8, trailing bytes, unhashable map keys,
nesting deeper than `MAX_DEPTH` (E001). Counts are checked against the bytes that remain
before anything is allocated, so a hostile length cannot make it allocate.

`packb(obj)` picks the smallest encoding for each value, exactly as `msgpack.packb` does
with its defaults (the test suite uses that package as the oracle), so metadata written
here reads the same in aprender's `rmp-serde`.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Dict, List, NamedTuple, Tuple

from ..errors import AprError, ErrorCode

MAX_DEPTH = 64


class ExtType(NamedTuple):
    """A MessagePack extension value, kept opaque."""

    code: int
    data: bytes


_FIXED = {  # type byte -> (struct format, size) for fixed-width scalars
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}
_LENGTH = {1: ">B", 2: ">H", 4: ">I"}
# type byte -> (kind, width of its length field)
_SIZED = {0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
          0xC7: ("ext", 1), 0xC8: ("ext", 2), 0xC9: ("ext", 4),
          0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4),
          0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4)}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise AprError(ErrorCode.CORRUPT, "MessagePack data truncated", offset=self.pos,
                           wanted=n, size=len(self.data))
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str, size: int) -> Any:
        return struct.unpack(fmt, self.take(size))[0]

    def remaining(self) -> int:
        return len(self.data) - self.pos


def unpackb(data: bytes) -> Any:
    """Decode exactly one MessagePack object from `data`."""
    reader = _Reader(bytes(data))
    value = _decode(reader, 0)
    if reader.remaining():
        raise AprError(ErrorCode.FORMAT, "trailing bytes after MessagePack object",
                       offset=reader.pos, trailing=reader.remaining())
    return value


def _decode(r: _Reader, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise AprError(ErrorCode.FORMAT, "MessagePack nesting too deep", limit=MAX_DEPTH)
    b = r.take(1)[0]
    if b <= 0x7F:
        return b
    if b >= 0xE0:
        return b - 0x100
    if 0x80 <= b <= 0x8F:
        return _map(r, b & 0x0F, depth)
    if 0x90 <= b <= 0x9F:
        return _array(r, b & 0x0F, depth)
    if 0xA0 <= b <= 0xBF:
        return _str(r, b & 0x1F)
    if b == 0xC0:
        return None
    if b in (0xC2, 0xC3):
        return b == 0xC3
    if b in _FIXED:
        fmt, size = _FIXED[b]
        return r.unpack(fmt, size)
    if b in _FIXEXT:
        code = r.unpack(">b", 1)
        return ExtType(code, r.take(_FIXEXT[b]))
    if b in _SIZED:
        kind, width = _SIZED[b]
        n = r.unpack(_LENGTH[width], width)
        if kind == "bin":
            return r.take(n)
        if kind == "str":
            return _str(r, n)
        if kind == "ext":
            code = r.unpack(">b", 1)
            return ExtType(code, r.take(n))
        if kind == "array":
            return _array(r, n, depth)
        return _map(r, n, depth)
    raise AprError(ErrorCode.FORMAT, "reserved MessagePack type byte", byte="0x{:02x}".format(b),
                   offset=r.pos - 1)


def _str(r: _Reader, n: int) -> str:
    raw = r.take(n)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AprError(ErrorCode.FORMAT, "MessagePack string is not valid UTF-8",
                       offset=r.pos - n) from None


def _array(r: _Reader, n: int, depth: int) -> List[Any]:
    if n > r.remaining():  # every element takes at least one byte
        raise AprError(ErrorCode.CORRUPT, "MessagePack array longer than the data", count=n,
                       remaining=r.remaining())
    return [_decode(r, depth + 1) for _ in range(n)]


def _map(r: _Reader, n: int, depth: int) -> Dict[Any, Any]:
    if 2 * n > r.remaining():
        raise AprError(ErrorCode.CORRUPT, "MessagePack map longer than the data", count=n,
                       remaining=r.remaining())
    out: Dict[Any, Any] = {}
    for _ in range(n):
        key = _decode(r, depth + 1)
        if isinstance(key, list):
            key = _freeze(key)
        elif isinstance(key, dict):
            raise AprError(ErrorCode.FORMAT, "MessagePack map key is a map", offset=r.pos)
        out[key] = _decode(r, depth + 1)
    return out


def _freeze(value: List[Any]) -> Tuple[Any, ...]:
    """Array keys become tuples (as msgpack-python does with use_list for keys)."""
    items = []
    for item in value:
        if isinstance(item, dict):
            raise AprError(ErrorCode.FORMAT, "MessagePack map key contains a map")
        items.append(_freeze(item) if isinstance(item, list) else item)
    return tuple(items)


def packb(obj: Any) -> bytes:
    """Encode `obj` (None, bool, int, float, str, bytes, list/tuple, dict, ExtType)."""
    out: List[bytes] = []
    _encode(obj, out, 0)
    return b"".join(out)


def _len_header(n: int, fix_base: int, fix_max: int, codes: Tuple[int, ...],
                widths: Tuple[int, ...]) -> bytes:
    if fix_max and n <= fix_max:
        return bytes([fix_base | n])
    for code, width in zip(codes, widths):
        if n < 1 << (8 * width):
            return bytes([code]) + struct.pack(_LENGTH[width], n)
    raise AprError(ErrorCode.ARGUMENT, "MessagePack value too long", length=n)


def _encode(obj: Any, out: List[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise AprError(ErrorCode.ARGUMENT, "value nested too deeply for MessagePack")
    if obj is None:
        out.append(b"\xc0")
    elif obj is True or obj is False:
        out.append(b"\xc3" if obj else b"\xc2")
    elif isinstance(obj, int):
        out.append(_int(obj))
    elif isinstance(obj, float):
        out.append(b"\xcb" + struct.pack(">d", obj))
    elif isinstance(obj, str):
        raw = obj.encode("utf-8", "surrogatepass")
        out.append(_len_header(len(raw), 0xA0, 31, (0xD9, 0xDA, 0xDB), (1, 2, 4)) + raw)
    elif isinstance(obj, ExtType):
        out.append(_ext(obj))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        out.append(_len_header(len(raw), 0, 0, (0xC4, 0xC5, 0xC6), (1, 2, 4)) + raw)
    elif isinstance(obj, (list, tuple)):
        out.append(_len_header(len(obj), 0x90, 15, (0xDC, 0xDD), (2, 4)))
        for item in obj:
            _encode(item, out, depth + 1)
    elif isinstance(obj, dict):
        out.append(_len_header(len(obj), 0x80, 15, (0xDE, 0xDF), (2, 4)))
        for key, value in obj.items():
            _encode(key, out, depth + 1)
            _encode(value, out, depth + 1)
    else:
        raise AprError(ErrorCode.ARGUMENT, "cannot encode type in MessagePack",
                       type=type(obj).__name__)


def _int(n: int) -> bytes:
    if 0 <= n <= 0x7F:
        return bytes([n])
    if -32 <= n < 0:
        return bytes([n + 0x100])
    if n > 0:
        for code, fmt, bits in ((0xCC, ">B", 8), (0xCD, ">H", 16), (0xCE, ">I", 32),
                                (0xCF, ">Q", 64)):
            if n < 1 << bits:
                return bytes([code]) + struct.pack(fmt, n)
    else:
        for code, fmt, bits in ((0xD0, ">b", 8), (0xD1, ">h", 16), (0xD2, ">i", 32),
                                (0xD3, ">q", 64)):
            if n >= -(1 << (bits - 1)):
                return bytes([code]) + struct.pack(fmt, n)
    raise AprError(ErrorCode.ARGUMENT, "integer out of MessagePack range", value=n)


def _ext(ext: ExtType) -> bytes:
    data = bytes(ext.data)
    code = struct.pack(">b", ext.code)
    for size, type_byte in ((1, 0xD4), (2, 0xD5), (4, 0xD6), (8, 0xD7), (16, 0xD8)):
        if len(data) == size:
            return bytes([type_byte]) + code + data
    return _len_header(len(data), 0, 0, (0xC7, 0xC8, 0xC9), (1, 2, 4)) + code + data


def to_json_safe(value: Any) -> Any:
    """A JSON-serialisable copy: bytes -> hex, ExtType -> {"ext", "data"}, NaN/Inf ->
    strings, non-string keys -> str(key)."""
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else str(k)): to_json_safe(v)
                for k, v in value.items()}
    if isinstance(value, ExtType):  # before tuple: ExtType is a NamedTuple
        return {"ext": value.code, "data": value.data.hex()}
    if isinstance(value, (list, tuple)):
        return [to_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


__all__ = ["ExtType", "packb", "unpackb", "to_json_safe", "MAX_DEPTH"]
