"""SafeTensors: reader and writer for Hugging Face's `.safetensors` files.

Layout: `u64 LE N`, then `N` bytes of UTF-8 JSON, then the data region. The JSON object maps
each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to
the data region) and may hold `"__metadata__"`, a str -> str map.

The reader validates the way the reference implementation (the `safetensors` Rust crate)
does, before allocating anything beyond the header: header length capped and inside the
file, tensors sorted by offset must tile the data region exactly (no gap, no overlap, no
trailing bytes), each span must equal `nbytes(shape, dtype)`. It is stricter in three places:
duplicate JSON keys are rejected (serde silently keeps the last one), NaN/Infinity
literals and lone surrogates are rejected (serde rejects those too, Python's json does not),
and tensors of more than 8 dimensions are refused (apr's cap; the format has none).

The writer reproduces the library's output byte for byte: tensors sorted by the Rust
`Dtype` enum order descending (i.e. by alignment, widest first) then by name, compact JSON
with `__metadata__` first, header padded with spaces to a multiple of 8.

Standard library only (ARCHITECTURE §4: the format layer runs in Pyodide without numpy).
"""
from __future__ import annotations

import json
import struct
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..atomic import atomic_output
from ..dtypes import DType, from_st_name, st_name_for_write
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..json_files import parse_json, short
from ..tensor import MAX_DIMS, ModelFile, TensorInfo, check_shape

# The safetensors crate's MAX_HEADER_SIZE: a header this large is refused before reading it.
DEFAULT_MAX_HEADER_SIZE = 100000000
METADATA_KEY = "__metadata__"
_PREFIX = 8          # the u64 header length
_ALIGN = 8           # the crate pads the JSON header to a multiple of 8 bytes
_U64_MAX = (1 << 64) - 1

# Declaration order of the crate's `Dtype` enum ("MUST be in increasing alignment order").
# The writer sorts by position here, descending, then by name — exactly the crate's
# `prepare()` — so our files are byte-identical to `safetensors.numpy.save`'s.
# Names we cannot store (F4, C64, ...) are listed so the ranks match the crate's.
_CRATE_DTYPE_ORDER = (
    "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
    "F64", "I64", "U64",
)
_CRATE_RANK = {name: rank for rank, name in enumerate(_CRATE_DTYPE_ORDER)}


class SafeTensorsFile(ModelFile):
    """A parsed `.safetensors` file; tensor bytes are read only by `read_raw`.

    `metadata` is the `__metadata__` map ({} when absent); `tensors` are in data-offset
    order; `header_size` is N and `data_start` (8 + N) the absolute start of the data.
    """

    format = "safetensors"

    def __init__(self, source: ByteSource, header_size: int, metadata: Dict[str, str],
                 tensors: List[TensorInfo], owns_source: bool = False) -> None:
        super().__init__()
        self.source = source
        self.header_size = header_size
        self.data_start = _PREFIX + header_size
        self.metadata = metadata
        self.tensors = {info.name: info for info in tensors}
        self.owns_source = owns_source

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self.source.read(info.offset, info.size)


# ---------------------------------------------------------------------------------------
# Reading

def read_safetensors(source: Any,
                     max_header_size: int = DEFAULT_MAX_HEADER_SIZE) -> SafeTensorsFile:
    """Parse a SafeTensors file from a path, bytes-like object or `ByteSource`.

    Reads only the 8 + N header bytes. Raises `AprError`: CORRUPT for anything out of range
    (truncation, header length past the end, gaps, overlaps, wrong spans), FORMAT for bad
    UTF-8/JSON/types/unknown dtypes, MEMORY when N exceeds `max_header_size`, UNSUPPORTED
    for more than 8 dimensions.
    """
    owns = not isinstance(source, ByteSource)
    src = open_source(source)
    try:
        header_size, metadata, tensors = parse_header(src, max_header_size)
    except BaseException:
        if owns:
            src.close()
        raise
    return SafeTensorsFile(src, header_size, metadata, tensors, owns_source=owns)


def parse_header(source: ByteSource, max_header_size: int = DEFAULT_MAX_HEADER_SIZE
                 ) -> Tuple[int, Dict[str, str], List[TensorInfo]]:
    """Validate the header of `source`; return (N, metadata, tensors in offset order)."""
    size = source.size
    if size < _PREFIX:
        raise AprError(ErrorCode.CORRUPT, "file too short for the 8-byte header length",
                       source=source.name, size=size)
    (header_size,) = struct.unpack("<Q", source.read(0, _PREFIX))
    # Range first, then the cap: a length past the end is corruption (a truncated or
    # garbage file), a length within the file but over the cap is a size limit.
    if header_size > size - _PREFIX:
        raise AprError(ErrorCode.CORRUPT, "header length runs past the end of the file",
                       source=source.name, header_size=header_size, size=size)
    if header_size > max_header_size:
        raise AprError(ErrorCode.MEMORY, "header larger than the configured limit",
                       source=source.name, header_size=header_size, limit=max_header_size)
    document = load_json_strict(source.read(_PREFIX, header_size), source.name)
    if not isinstance(document, dict):
        raise AprError(ErrorCode.FORMAT, "SafeTensors header must be a JSON object",
                       source=source.name, got=type(document).__name__)
    metadata = _parse_metadata(document.pop(METADATA_KEY, None), source.name)
    entries = [_parse_entry(name, entry, source.name) for name, entry in document.items()]
    tensors = _check_layout(entries, size - _PREFIX - header_size, _PREFIX + header_size,
                            source.name)
    return header_size, metadata, tensors


class _Entry(NamedTuple):
    name: str
    dtype: DType
    shape: Tuple[int, ...]
    begin: int
    end: int


def load_json_strict(data: bytes, what: str) -> Any:
    """UTF-8 JSON with no duplicate keys and no NaN/Infinity (AprError FORMAT), as serde
    reads it; shared with the sharded index reader."""
    return parse_json(data, what, strict=True, want_object=False)


def _check_text(text: str, what: str, source: str) -> None:
    # Python's json accepts escaped lone surrogates ("\ud800"); serde does not, and such a
    # string could never be written back as UTF-8.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise AprError(ErrorCode.FORMAT, "{} is not valid Unicode".format(what),
                       value=short(repr(text)), source=source)


def _parse_metadata(value: Any, source: str) -> Dict[str, str]:
    if value is None:  # absent, or null as serde's Option accepts
        return {}
    if not isinstance(value, dict):
        raise AprError(ErrorCode.FORMAT, "__metadata__ must be an object of strings",
                       source=source, got=type(value).__name__)
    for key, item in value.items():
        if not isinstance(item, str):
            raise AprError(ErrorCode.FORMAT, "__metadata__ values must be strings",
                           key=short(key), got=type(item).__name__, source=source)
        _check_text(key, "metadata key", source)
        _check_text(item, "metadata value", source)
    return value


def _is_u64(value: Any) -> bool:
    # type() rather than isinstance(): JSON true/false arrive as bool, a subclass of int.
    return type(value) is int and 0 <= value <= _U64_MAX


def _parse_entry(name: str, entry: Any, source: str) -> _Entry:
    _check_text(name, "tensor name", source)
    if not isinstance(entry, dict):
        raise AprError(ErrorCode.FORMAT, "tensor entry must be an object",
                       tensor=short(name), source=source)
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise AprError(ErrorCode.FORMAT, "tensor entry lacks '{}'".format(field),
                           tensor=short(name), source=source)
    dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype_name, str):
        raise AprError(ErrorCode.FORMAT, "dtype must be a string", tensor=short(name))
    dtype = from_st_name(dtype_name)
    if not isinstance(shape, list) or not all(_is_u64(dim) for dim in shape):
        raise AprError(ErrorCode.FORMAT, "shape must be a list of non-negative integers",
                       tensor=short(name), shape=short(repr(shape)), source=source)
    if len(shape) > MAX_DIMS:
        raise AprError(ErrorCode.UNSUPPORTED,
                       "tensor has {} dimensions; SafeTensors allows it but apr supports at "
                       "most {}".format(len(shape), MAX_DIMS),
                       tensor=short(name), dims=len(shape), source=source)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_u64, offsets))):
        raise AprError(ErrorCode.FORMAT, "data_offsets must be [begin, end] integers",
                       tensor=short(name), data_offsets=short(repr(offsets)), source=source)
    return _Entry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _check_layout(entries: List[_Entry], data_len: int, data_start: int,
                  source: str) -> List[TensorInfo]:
    """The crate's rule: sorted by offsets, spans tile [0, data_len) exactly."""
    # Stable sort: zero-size tensors sharing an offset keep their JSON order, as in the crate.
    entries = sorted(entries, key=lambda e: (e.begin, e.end))
    cursor = 0
    tensors: List[TensorInfo] = []
    for entry in entries:
        context = dict(tensor=short(entry.name), data_offsets=[entry.begin, entry.end],
                       source=source)
        if entry.end < entry.begin:
            raise AprError(ErrorCode.CORRUPT, "data_offsets end before they begin", **context)
        if entry.begin < cursor:
            raise AprError(ErrorCode.CORRUPT, "tensor data overlaps the previous tensor",
                           previous_end=cursor, **context)
        if entry.begin > cursor:
            raise AprError(ErrorCode.CORRUPT, "gap in the data region before tensor",
                           previous_end=cursor, **context)
        if entry.end > data_len:
            raise AprError(ErrorCode.CORRUPT, "tensor data runs past the end of the file",
                           data_len=data_len, **context)
        expected = entry.dtype.nbytes(entry.shape)
        if entry.end - entry.begin != expected:
            raise AprError(ErrorCode.CORRUPT, "data_offsets span does not match dtype and shape",
                           expected=expected, dtype=entry.dtype.name, shape=entry.shape,
                           **context)
        cursor = entry.end
        tensors.append(TensorInfo(entry.name, entry.dtype, entry.shape, data_start + entry.begin,
                                  entry.end - entry.begin))
    if cursor != data_len:
        raise AprError(ErrorCode.CORRUPT, "data region has bytes no tensor covers",
                       covered=cursor, data_len=data_len, source=source)
    return tensors


# ---------------------------------------------------------------------------------------
# Writing

class _Planned(NamedTuple):
    tensor: Any
    name: str
    dtype: DType
    shape: Tuple[int, ...]
    nbytes: int


def plan_safetensors(tensors: Iterable[Any], metadata: Optional[Dict[str, str]] = None
                     ) -> Tuple[bytes, List[Any]]:
    """Validate and order `tensors`; return (8-byte length + padded header, ordered tensors).

    Nothing is loaded: sizes come from `DType.nbytes`, so the header is known before any
    payload is read. Raises `AprError` ARGUMENT for bad names/metadata, UNSUPPORTED for
    dtypes SafeTensors cannot hold, FORMAT for bad shapes, MEMORY for an oversized header.
    """
    _check_write_metadata(metadata)
    planned: List[_Planned] = []
    seen = set()
    for tensor in tensors:
        name = tensor.name
        if not isinstance(name, str) or name == METADATA_KEY:
            raise AprError(ErrorCode.ARGUMENT, "tensor name must be a string other than "
                           "'__metadata__'", tensor=repr(name))
        if name in seen:
            raise AprError(ErrorCode.ARGUMENT, "duplicate tensor name", tensor=name)
        seen.add(name)
        _check_write_text(name, "tensor name")
        dtype = tensor.dtype
        st_name_for_write(dtype)
        shape = check_shape(name, dtype, tensor.shape)
        planned.append(_Planned(tensor, name, dtype, shape, dtype.nbytes(shape)))
    planned.sort(key=lambda p: (-_CRATE_RANK[p.dtype.st_name], p.name))

    header: Dict[str, Any] = {}
    if metadata is not None:
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for item in planned:
        header[item.name] = {"dtype": item.dtype.st_name, "shape": list(item.shape),
                             "data_offsets": [offset, offset + item.nbytes]}
        offset += item.nbytes
    # Compact separators and raw UTF-8 match serde_json's output exactly (it escapes
    # only '"', '\\' and control characters, with the same short forms as Python).
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % _ALIGN)
    if len(text) > DEFAULT_MAX_HEADER_SIZE:
        raise AprError(ErrorCode.MEMORY, "header would exceed the size readers accept",
                       header_size=len(text), limit=DEFAULT_MAX_HEADER_SIZE)
    return struct.pack("<Q", len(text)) + text, planned


def _check_write_metadata(metadata: Optional[Dict[str, str]]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise AprError(ErrorCode.ARGUMENT, "metadata must be a dict of str -> str",
                       got=type(metadata).__name__)
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise AprError(ErrorCode.ARGUMENT, "SafeTensors metadata holds only strings",
                           key=repr(key), value_type=type(value).__name__)
        _check_write_text(key, "metadata key")
        _check_write_text(value, "metadata value")


def _check_write_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise AprError(ErrorCode.ARGUMENT, "{} is not valid Unicode".format(what),
                       value=short(repr(text)))


def write_safetensors(path: Any, tensors: Sequence[Any],
                      metadata: Optional[Dict[str, str]] = None,
                      overwrite: bool = True) -> int:
    """Write `tensors` (objects with name, dtype, shape, load()) to `path`; return its size.

    The header is computed first from the shapes; payloads are then loaded and written one
    at a time, so a model streams from another file without being held in memory. The
    output appears atomically (temp file + rename). `metadata=None` omits `__metadata__`;
    `{}` writes an empty one, as the library does.
    """
    header, planned = plan_safetensors(tensors, metadata)
    total = len(header)
    with atomic_output(path, overwrite=overwrite) as handle:
        handle.write(header)
        for item in planned:
            data = item.tensor.load()
            got = memoryview(data).nbytes
            if got != item.nbytes:
                raise AprError(ErrorCode.ARGUMENT, "tensor data size does not match dtype "
                               "and shape", tensor=item.name, expected=item.nbytes, got=got)
            handle.write(data)
            total += got
    return total


__all__ = ["SafeTensorsFile", "read_safetensors", "parse_header", "write_safetensors",
           "plan_safetensors", "load_json_strict", "DEFAULT_MAX_HEADER_SIZE", "METADATA_KEY"]
