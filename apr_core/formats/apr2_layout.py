"""APR v2 binary structures (seed 000 §3, ARCHITECTURE §4): header, index entries, footer.

Pure packing and parsing, no I/O: the reader (`apr2.py`), the writer (`apr2_writer.py`)
and the tests that hand-build damaged files all share these definitions, so a field's
width or position is written down exactly once. All integers are little-endian.

File layout::

    header (32) | metadata JSON | index | zero pad to alignment | payloads (each aligned)
    | [signature block (96) when SIGNED] | footer (16)
"""
from __future__ import annotations

import struct
from typing import List, NamedTuple, Sequence, Tuple

from ..dtypes import DType, from_apr_id
from ..errors import AprError, ErrorCode
from ..tensor import MAX_DIMS
from .flags import SIGNED

MAGIC = b"APR2"
FOOTER_MAGIC = b"2RPA"
VERSION_MAJOR = 2
VERSION_MINOR = 0
APR_VERSION_STRING = "2.0.0"

HEADER = struct.Struct("<4sHHIIIIII")
FOOTER = struct.Struct("<I4sQ")
INDEX_HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size            # 32
FOOTER_SIZE = FOOTER.size            # 16
SIGNATURE_SIZE = 96                  # Ed25519 signature (64) + public key (32)
U32_MAX = 0xFFFFFFFF
MAX_NAME_BYTES = 0xFFFF
DEFAULT_MAX_METADATA = 100 * 2 ** 20  # readers refuse larger metadata (E008); writers too

_NAME_LEN = struct.Struct("<H")
_DTYPE_NDIMS = struct.Struct("<BB")
_U64 = struct.Struct("<Q")
_ENTRY_TAIL = struct.Struct("<QQQI")  # offset, size, raw_size, flags
# Smallest possible entry: a 1-byte name and no dims; bounds tensor_count before parsing.
MIN_ENTRY_SIZE = _NAME_LEN.size + 1 + _DTYPE_NDIMS.size + _ENTRY_TAIL.size


class Header(NamedTuple):
    """The 32-byte file header."""

    magic: bytes
    version_major: int
    version_minor: int
    flags: int
    metadata_offset: int
    metadata_size: int
    index_offset: int
    index_size: int
    data_offset: int

    def pack(self) -> bytes:
        return HEADER.pack(*self)


class Footer(NamedTuple):
    """The 16-byte footer: CRC32 of every preceding byte, reverse magic, total file size."""

    crc32: int
    magic: bytes
    file_size: int

    def pack(self) -> bytes:
        return FOOTER.pack(*self)


class IndexEntry(NamedTuple):
    """One tensor as the index stores it; `offset` is relative to the data section."""

    name: str
    dtype: DType
    dtype_id: int  # the id as stored (10/11 are read aliases of Q8_0/Q4_0)
    shape: Tuple[int, ...]
    offset: int
    size: int
    raw_size: int
    flags: int


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def trailer_size(flags: int) -> int:
    """Bytes after the tensor data: the optional signature block plus the footer.

    The one place that knows what follows the data section, so "end of tensor data" is
    `file_size - trailer_size(flags)` everywhere.
    """
    return FOOTER_SIZE + (SIGNATURE_SIZE if flags & SIGNED else 0)


def data_end(file_size: int, flags: int) -> int:
    """Offset one past the last byte tensor payloads may occupy."""
    return file_size - trailer_size(flags)


def parse_header(data: bytes) -> Header:
    """Unpack 32 header bytes; checks magic (E001) and major version (E003) only."""
    if len(data) < HEADER_SIZE or data[:4] != MAGIC:
        raise AprError(ErrorCode.FORMAT, "not an APR v2 file (bad magic)",
                       magic=bytes(data[:4]))
    header = Header(*HEADER.unpack_from(data, 0))
    if header.version_major != VERSION_MAJOR:
        raise AprError(ErrorCode.VERSION, "unsupported APR major version",
                       version="{}.{}".format(header.version_major, header.version_minor),
                       supported=VERSION_MAJOR)
    return header


def parse_footer(data: bytes) -> Footer:
    return Footer(*FOOTER.unpack_from(data, 0))


def entry_size(name_bytes: bytes, n_dims: int) -> int:
    """Bytes one index entry takes: fixed once the name and rank are known."""
    return _NAME_LEN.size + len(name_bytes) + _DTYPE_NDIMS.size + 8 * n_dims + _ENTRY_TAIL.size


def index_size(entries: Sequence[Tuple[bytes, int]]) -> int:
    """Index bytes for `(name_bytes, n_dims)` pairs, including the 8-byte index header."""
    return INDEX_HEADER.size + sum(entry_size(name, n) for name, n in entries)


def pack_entry(name_bytes: bytes, dtype_id: int, shape: Sequence[int], offset: int,
               size: int, raw_size: int, flags: int) -> bytes:
    """One index entry; raw field values, so tests can build deliberately bad entries."""
    parts = [_NAME_LEN.pack(len(name_bytes)), name_bytes,
             _DTYPE_NDIMS.pack(dtype_id, len(shape))]
    parts.extend(_U64.pack(dim) for dim in shape)
    parts.append(_ENTRY_TAIL.pack(offset, size, raw_size, flags))
    return b"".join(parts)


def pack_index(entries: Sequence[bytes]) -> bytes:
    return INDEX_HEADER.pack(len(entries), 0) + b"".join(entries)


def parse_index(data: bytes, warnings: List[str]) -> List[IndexEntry]:
    """Parse and structurally validate the whole index.

    Checks, before building anything proportional to the claimed count: the count fits
    in the index (E002), every entry lies inside it and together they fill it exactly
    (E002), names are valid UTF-8 (E002), sorted bytewise and unique (E002), at most 8
    dims (E002), dtype ids are known (E001).
    """
    size = len(data)
    if size < INDEX_HEADER.size:
        raise AprError(ErrorCode.CORRUPT, "tensor index shorter than its 8-byte header",
                       index_size=size)
    count, reserved = INDEX_HEADER.unpack_from(data, 0)
    if reserved:
        warnings.append("index reserved field is {} (expected 0)".format(reserved))
    if count > (size - INDEX_HEADER.size) // MIN_ENTRY_SIZE:
        raise AprError(ErrorCode.CORRUPT, "tensor count does not fit in the index",
                       tensor_count=count, index_size=size)
    view = memoryview(data)
    pos = INDEX_HEADER.size
    entries: List[IndexEntry] = []
    previous = b""  # names are non-empty, so every name sorts after this
    for number in range(count):
        pos, entry, name_bytes = _parse_entry(view, pos, number)
        if name_bytes == previous:
            raise AprError(ErrorCode.CORRUPT, "duplicate tensor name in index",
                           tensor=entry.name)
        if name_bytes < previous:
            raise AprError(ErrorCode.CORRUPT, "tensor index is not sorted by name",
                           tensor=entry.name, entry=number)
        previous = name_bytes
        entries.append(entry)
    if pos != size:
        raise AprError(ErrorCode.CORRUPT, "tensor index has trailing bytes",
                       parsed=pos, index_size=size)
    return entries


def _need(view: memoryview, pos: int, length: int, number: int) -> None:
    if pos + length > len(view):
        raise AprError(ErrorCode.CORRUPT, "index entry runs past the end of the index",
                       entry=number, offset=pos, index_size=len(view))


def _parse_entry(view: memoryview, pos: int, number: int) -> Tuple[int, IndexEntry, bytes]:
    _need(view, pos, _NAME_LEN.size, number)
    (name_len,) = _NAME_LEN.unpack_from(view, pos)
    pos += _NAME_LEN.size
    _need(view, pos, name_len + _DTYPE_NDIMS.size, number)
    name_bytes = bytes(view[pos:pos + name_len])
    pos += name_len
    if not name_bytes:
        raise AprError(ErrorCode.CORRUPT, "empty tensor name in index", entry=number)
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise AprError(ErrorCode.CORRUPT, "tensor name is not valid UTF-8", entry=number,
                       name=name_bytes)
    dtype_id, n_dims = _DTYPE_NDIMS.unpack_from(view, pos)
    pos += _DTYPE_NDIMS.size
    if n_dims > MAX_DIMS:
        raise AprError(ErrorCode.CORRUPT, "tensor has more than 8 dimensions", tensor=name,
                       n_dims=n_dims)
    try:
        dtype = from_apr_id(dtype_id)
    except AprError as exc:
        raise AprError(exc.code, exc.message, tensor=name, **exc.context)
    _need(view, pos, 8 * n_dims + _ENTRY_TAIL.size, number)
    shape = struct.unpack_from("<{}Q".format(n_dims), view, pos)
    pos += 8 * n_dims
    offset, stored, raw_size, flags = _ENTRY_TAIL.unpack_from(view, pos)
    pos += _ENTRY_TAIL.size
    entry = IndexEntry(name, dtype, dtype_id, tuple(shape), offset, stored, raw_size, flags)
    return pos, entry, name_bytes


__all__ = ["MAGIC", "FOOTER_MAGIC", "VERSION_MAJOR", "VERSION_MINOR", "APR_VERSION_STRING",
           "HEADER_SIZE", "FOOTER_SIZE", "SIGNATURE_SIZE", "U32_MAX", "MAX_NAME_BYTES",
           "DEFAULT_MAX_METADATA",
           "Header", "Footer", "IndexEntry", "align_up", "trailer_size", "data_end",
           "parse_header", "parse_footer", "entry_size", "index_size", "pack_entry",
           "pack_index", "parse_index"]
