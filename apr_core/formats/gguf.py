"""GGUF v2/v3 (llama.cpp) reader, plus the KV block that carries GGUF metadata through APR.

Layout (all little-endian): `b"GGUF"`, u32 version, u64 tensor_count, u64 kv_count, the
key/value pairs (`gguf_values`), then per tensor `string name, u32 n_dims, u64 dims[n_dims]
(innermost first), u32 ggml_type, u64 offset` (relative to the data section), zero padding
to `general.alignment` (default 32), and the tensor data. v1 (u32 counts) is refused; v2
and v3 share one layout.

GGUF lists dims innermost-first, so `TensorInfo.shape` is the reversed list (row-major,
outermost first) over the *identical* bytes: never transposed (ARCHITECTURE §4).

Everything is validated before anything is allocated: counts and lengths against the bytes
left in the file, a cap on the header size, nesting depth, dims and element counts, tensor
types, alignment, names, and finally that every tensor lies inside the file without
overlapping another. Reading is lazy: parsing reads only header bytes; tensor bytes are
read by `read_raw`. The writer lives in `gguf_write.py` and is re-exported here.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List

from .. import dtypes
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..tensor import MAX_DIMS, ModelFile, TensorInfo, check_layout
from .gguf_lazy import materialize
from .gguf_values import (ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, SUPPORTED_VERSIONS,
                          Cursor, Spec, read_value, value_type)

# Real headers (vocabularies of 250k tokens with merges) stay below ~25 MiB. Decoded into
# Python objects a header can take up to ~20x its size, hence a cap rather than the file size.
MAX_HEADER_BYTES = 64 << 20
_MIN_KV_BYTES = 8 + 4 + 1            # empty key, type, smallest value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset (0 dims)
_INT64_MAX = (1 << 63) - 1


class GGUFFile(ModelFile):
    """A parsed GGUF file.

    `metadata` maps key -> value (int/float/bool/str/list) in file order, `kv_types` maps
    key -> type spec (`gguf_values`), `tensors` maps name -> TensorInfo in file order with
    absolute offsets. `data_offset` is where the data section starts, `header_size` where
    the tensor infos end. A source opened here from a path is closed by `close()`; a
    ByteSource passed in stays the caller's.
    """

    format = "gguf"

    def __init__(self, source: ByteSource, owns_source: bool) -> None:
        super().__init__()
        self.source = source
        self.owns_source = owns_source
        self.version = 3
        self.alignment = DEFAULT_ALIGNMENT
        self.data_offset = 0
        self.header_size = 0
        self.kv_types: Dict[str, Spec] = {}

    @property
    def metadata(self) -> Dict[str, Any]:   # type: ignore[override]
        """Key -> value with every array a plain list (large arrays decoded on first use)."""
        materialize(self._metadata)
        return self._metadata

    @metadata.setter
    def metadata(self, value: Dict[str, Any]) -> None:
        self._metadata = value

    @property
    def header_metadata(self) -> Dict[str, Any]:
        """Key -> value with large arrays left as lazy `GGUFArray`s (`len()` is free): for
        readers of the header only (inspect, describe). Convert with `gguf_lazy.plain`."""
        return self._metadata

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self.source.read(info.offset, info.size)


def read_gguf(source: Any, max_header_bytes: int = MAX_HEADER_BYTES) -> GGUFFile:
    """Parse a GGUF v2/v3 file's header from a ByteSource, bytes or path (lazy)."""
    src = open_source(source)
    result = GGUFFile(src, owns_source=src is not source)
    try:
        _parse(result, Cursor(src, max_header_bytes))
    except BaseException:
        result.close()
        raise
    return result


def _parse(out: GGUFFile, cur: Cursor) -> None:
    name = cur.source.name
    magic = cur.take(4, "magic")
    if magic != GGUF_MAGIC:
        raise AprError(ErrorCode.FORMAT, "not a GGUF file (bad magic)", magic=magic,
                       source=name)
    cur.promise(20, "header")
    out.version = _read_version(cur, name)
    tensor_count = cur.u64("tensor_count")
    kv_count = cur.u64("kv_count")
    # Bound both counts by the bytes they need at the very least, before any loop runs.
    cur.promise(kv_count * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_INFO_BYTES,
                "{} key/value pairs and {} tensor infos".format(kv_count, tensor_count))

    for index in range(kv_count):
        # Re-promising what is left keeps read-ahead going without passing the header.
        cur.promise((kv_count - index) * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_INFO_BYTES,
                    "metadata")
        key = cur.string("metadata key").decode("utf-8", "surrogateescape")
        if key in out.header_metadata:
            raise AprError(ErrorCode.FORMAT, "duplicate GGUF metadata key", key=key,
                           source=name)
        row = value_type(cur.u32(key), key)
        out.header_metadata[key], out.kv_types[key] = read_value(cur, row, key)
    out.alignment = _alignment(out, name)

    relative: List[TensorInfo] = []   # offsets relative to the not yet known data start
    for index in range(tensor_count):
        cur.promise((tensor_count - index) * _MIN_TENSOR_INFO_BYTES, "tensor infos")
        info = _read_tensor_info(cur, index, out.alignment, name)
        if info.name in out.tensors:
            raise AprError(ErrorCode.FORMAT, "duplicate tensor name", tensor=info.name,
                           source=name)
        out.tensors[info.name] = info
        relative.append(info)

    out.header_size = cur.pos
    out.data_offset = _align_up(cur.pos, out.alignment)
    for info in relative:
        out.tensors[info.name] = info._replace(offset=out.data_offset + info.offset)
    check_layout(list(out.tensors.values()), out.data_offset, cur.size, source=name)


def _read_version(cur: Cursor, name: str) -> int:
    version = cur.u32("version")
    if version in SUPPORTED_VERSIONS:
        return version
    swapped = struct.unpack("<I", struct.pack(">I", version))[0]
    if version & 0xFFFF == 0 and swapped in (1, 2, 3):
        # llama.cpp's big-endian files byte-swap every number and every tensor element.
        raise AprError(ErrorCode.UNSUPPORTED, "big-endian GGUF files are not supported "
                       "(convert it to little-endian with gguf-py first)",
                       version=swapped, source=name)
    if version == 1:
        raise AprError(ErrorCode.VERSION, "GGUF v1 (32-bit counts) is not supported; "
                       "re-export the model with a current llama.cpp", version=1, source=name)
    raise AprError(ErrorCode.VERSION, "unsupported GGUF version", version=version,
                   supported=list(SUPPORTED_VERSIONS), source=name)


def _alignment(out: GGUFFile, name: str) -> int:
    if ALIGNMENT_KEY not in out.header_metadata:
        return DEFAULT_ALIGNMENT
    value = out.header_metadata[ALIGNMENT_KEY]
    if out.kv_types[ALIGNMENT_KEY] != "u32":
        raise AprError(ErrorCode.FORMAT, "general.alignment must be a u32",
                       type=repr(out.kv_types[ALIGNMENT_KEY]), source=name)
    if value <= 0 or value & (value - 1):
        raise AprError(ErrorCode.FORMAT, "general.alignment must be a power of two",
                       alignment=value, source=name)
    return value


def _read_tensor_info(cur: Cursor, index: int, alignment: int, name: str) -> TensorInfo:
    """One tensor info, validated; its offset is still relative to the data section."""
    raw_name = cur.string("tensor name")
    try:
        tensor = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise AprError(ErrorCode.FORMAT, "tensor name is not valid UTF-8", index=index,
                       name=raw_name[:64], source=name)
    n_dims = cur.u32(tensor)
    if n_dims > MAX_DIMS:
        raise AprError(ErrorCode.FORMAT, "tensor has too many dimensions", tensor=tensor,
                       n_dims=n_dims, max_dims=MAX_DIMS, source=name)
    cur.promise(8 * n_dims + 12, tensor)   # dims, type, offset
    dims = struct.unpack("<{}Q".format(n_dims), cur.take(8 * n_dims, tensor))
    type_id = cur.u32(tensor)
    offset = cur.u64(tensor)
    # llama.cpp holds dims and the element count in int64: anything larger is corrupt.
    count = 1
    for dim in dims:
        count *= dim
    if any(dim > _INT64_MAX for dim in dims) or count > _INT64_MAX:
        raise AprError(ErrorCode.FORMAT, "tensor dimensions out of range", tensor=tensor,
                       dims=list(dims), source=name)
    if offset % alignment:
        raise AprError(ErrorCode.FORMAT, "tensor data offset is not aligned", tensor=tensor,
                       offset=offset, alignment=alignment, source=name)
    shape = tuple(reversed(dims))
    try:
        dtype = dtypes.from_gguf_id(type_id)
        size = dtype.nbytes(shape)   # raises for rows that are not whole blocks
    except AprError as exc:
        raise AprError(exc.code, exc.message, tensor=tensor, source=name, **exc.context)
    return TensorInfo(tensor, dtype, shape, offset, size)


def _align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def gguf_kv_block(gguf: GGUFFile, lazy: bool = False) -> Dict[str, Any]:
    """The file's KV pairs in a JSON-able form, for APR metadata key "gguf".

    `write_gguf(path, tensors, kv=block["kv"], kv_types=block["types"],
    alignment=block["alignment"], version=block["version"])` reproduces the same pairs.
    The dicts are new; the lists inside are shared with `gguf`. `lazy` leaves large arrays
    as `GGUFArray`s (not JSON-able: `gguf_lazy.plain` converts) for header-only readers.
    """
    kv = gguf.header_metadata if lazy else gguf.metadata
    return {"version": gguf.version, "alignment": gguf.alignment,
            "kv": dict(kv), "types": dict(gguf.kv_types)}


def __getattr__(name: str) -> Any:
    """The writer's functions, re-exported on first use (a reader does not pay for the
    writer's imports: the atomic temp-file machinery)."""
    if name in ("write_gguf", "write_gguf_bytes"):
        from . import gguf_write
        return getattr(gguf_write, name)
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


__all__ = ["GGUFFile", "read_gguf", "gguf_kv_block", "write_gguf", "write_gguf_bytes",
           "GGUF_MAGIC", "DEFAULT_ALIGNMENT", "MAX_HEADER_BYTES", "SUPPORTED_VERSIONS"]
