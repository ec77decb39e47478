"""APR v2 writer (seed 000 §3, ARCHITECTURE §4).

The writer streams: every index entry has a fixed size once names and ranks are known,
so the index size (and hence `data_offset`) is computed before any payload is loaded.
It writes a header placeholder, the metadata and an index placeholder, streams each
tensor payload (one `load()` at a time, compressed per tensor when asked), then seeks
back to fill in the index and header, reads the file back through CRC32 and appends the
footer. All of it happens inside `atomic_output`, so a failure leaves no file behind.
"""
from __future__ import annotations

import hashlib
import io
import json
import zlib
from typing import IO, Any, Callable, Iterable, List, NamedTuple, Optional, Tuple

from ..atomic import atomic_output
from ..codecs import CODEC_IDS, CODEC_MASK, CODEC_NONE
from ..codecs.framing import encode_blocks
from ..dtypes import DType, apr_id_for_write
from ..errors import AprError, ErrorCode
from ..tensor import check_shape
from . import flags as F
from .apr2_layout import (APR_VERSION_STRING, DEFAULT_MAX_METADATA, FOOTER_MAGIC,
                          FOOTER_SIZE, HEADER_SIZE, MAGIC, MAX_NAME_BYTES, U32_MAX,
                          VERSION_MAJOR, VERSION_MINOR, Footer, Header, align_up, index_size,
                          pack_entry, pack_index)

ALIGNMENTS = (64, 32)
# Header bits a caller may ask for; the rest are computed here or belong to the signing
# and encryption layers, which rewrite the file themselves.
CALLER_FLAGS = F.SHARDED | F.STREAMING | F.SAFETENSORS_SRC | F.GGUF_SRC
READBACK_CHUNK = 1 << 22


class WriteResult(NamedTuple):
    """What was written: total size, footer CRC32, optional sha256 hex, header flags."""

    size: int
    crc32: int
    sha256: Optional[str]
    tensor_count: int
    flags: int


class PlannedTensor(NamedTuple):
    """A validated tensor awaiting its payload."""

    name_bytes: bytes
    tensor: Any
    dtype: DType
    dtype_id: int
    shape: Tuple[int, ...]
    nbytes: int


class _Plan(NamedTuple):
    items: List[PlannedTensor]
    metadata: bytes
    index_size: int
    data_offset: int
    alignment: int
    flags: int


def parse_compression(spec: Optional[str]) -> Tuple[int, Optional[int]]:
    """`None`/"none" -> (0, None); "lz4" -> (1, None); "zstd:19" -> (2, 19)."""
    if spec is None:
        return CODEC_NONE, None
    name, _, level_text = str(spec).lower().partition(":")
    codec = CODEC_IDS.get(name)
    if codec is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown compression codec", compression=spec,
                       known=sorted(CODEC_IDS))
    if not level_text:
        return codec, None
    try:
        return codec, int(level_text)
    except ValueError:
        raise AprError(ErrorCode.ARGUMENT, "compression level must be an integer",
                       compression=spec)


def write_apr2(path: Any, tensors: Iterable[Any], metadata: dict, alignment: int = 64,
               compression: Optional[str] = None, overwrite: bool = True, flags: int = 0,
               sha256: bool = False) -> WriteResult:
    """Write an APR v2 file atomically.

    `tensors`: objects with `name`, `dtype` (DType), `shape` (row-major) and `load()`
    returning the raw bytes (`RawTensor`, `LazyTensor`). `compression`: None, "lz4",
    "zstd" or "zstd:<level>"; a tensor whose compressed form is not smaller is stored raw.
    `flags`: extra header bits (SHARDED, STREAMING, *_SRC). `sha256=True` also hashes
    the written file (for shard manifests).
    """
    codec, level = parse_compression(compression)
    plan = _plan(tensors, metadata, alignment, flags)
    with atomic_output(path, overwrite=overwrite) as handle:
        return _write(handle, plan, lambda item: _payload(item, codec, level), sha256)


def write_apr2_bytes(tensors: Iterable[Any], metadata: dict, alignment: int = 64,
                     compression: Optional[str] = None, flags: int = 0) -> bytes:
    """The bytes `write_apr2` would write (for tests and the browser)."""
    codec, level = parse_compression(compression)
    plan = _plan(tensors, metadata, alignment, flags)
    buffer = io.BytesIO()
    _write(buffer, plan, lambda item: _payload(item, codec, level), False)
    return buffer.getvalue()


def rewrite_apr2(path: Any, model: Any, metadata: dict,
                 transform: Callable[[Any, bytes], bytes], set_flags: int = 0,
                 clear_flags: int = 0, overwrite: bool = True) -> WriteResult:
    """Copy the stored payloads of `model` (an `AprFile`) through
    `transform(index_entry, stored) -> stored` into a new file with `metadata`.

    Payloads are never decompressed, so codec choices survive byte for byte; offsets,
    sizes, alignment padding and the footer are recomputed. The encryption layer uses it
    (encrypt and decrypt are transforms); SIGNED is always cleared, since the output's
    bytes differ from what was signed.
    """
    items = [PlannedTensor(entry.name.encode("utf-8"), entry, entry.dtype, entry.dtype_id,
                           entry.shape, entry.dtype.nbytes(entry.shape))
             for entry in model.entries]
    meta = encode_metadata(metadata)
    alignment = model.alignment or 64
    idx_size = index_size([(item.name_bytes, len(item.shape)) for item in items])
    data_offset = align_up(HEADER_SIZE + len(meta) + idx_size, alignment)
    flags = (model.flags | set_flags) & ~(clear_flags | F.SIGNED | F.COMPRESSED)
    plan = _Plan(items, meta, idx_size, data_offset, alignment, flags)

    def encode(item: PlannedTensor) -> Tuple[bytes, int, int]:
        entry = item.tensor
        stored = model.source.read(model.data_offset + entry.offset, entry.size)
        return transform(entry, stored), entry.raw_size, entry.flags

    with atomic_output(path, overwrite=overwrite) as handle:
        return _write(handle, plan, encode, False)


def _plan(tensors: Iterable[Any], metadata: dict, alignment: int, flags: int) -> _Plan:
    """Validate everything that can be checked before a payload is loaded."""
    if alignment not in ALIGNMENTS:
        raise AprError(ErrorCode.ARGUMENT, "alignment must be 64 or 32", alignment=alignment)
    if flags & ~CALLER_FLAGS:
        raise AprError(ErrorCode.ARGUMENT, "header flags not settable by the writer",
                       flags=F.flag_names(flags & ~CALLER_FLAGS))
    items = check_tensors(tensors)
    quantized = any(item.dtype.quantized for item in items)
    items.sort(key=lambda item: item.name_bytes)
    meta = encode_metadata(metadata)
    idx_size = index_size([(item.name_bytes, len(item.shape)) for item in items])
    index_end = HEADER_SIZE + len(meta) + idx_size
    data_offset = align_up(index_end, alignment)
    if data_offset > U32_MAX:
        raise AprError(ErrorCode.MEMORY, "metadata and index exceed the 4 GiB header limit",
                       data_offset=data_offset)
    header_flags = (flags | F.alignment_flag(alignment)
                    | (F.QUANTIZED if quantized else 0))
    return _Plan(items, meta, idx_size, data_offset, alignment, header_flags)


def check_tensors(tensors: Iterable[Any]) -> List[PlannedTensor]:
    """Validate names (unique, UTF-8, <= 65535 bytes), dtypes and shapes; input order."""
    items: List[PlannedTensor] = []
    seen = set()
    for tensor in tensors:
        name = getattr(tensor, "name", None)
        if not isinstance(name, str) or not name:
            raise AprError(ErrorCode.ARGUMENT, "tensor name must be a non-empty string",
                           name=name)
        try:
            name_bytes = name.encode("utf-8")
        except UnicodeEncodeError:
            raise AprError(ErrorCode.ARGUMENT, "tensor name is not valid UTF-8", name=name)
        if len(name_bytes) > MAX_NAME_BYTES:
            raise AprError(ErrorCode.ARGUMENT, "tensor name longer than 65535 bytes",
                           name=name[:64] + "...", length=len(name_bytes))
        if name_bytes in seen:
            raise AprError(ErrorCode.ARGUMENT, "duplicate tensor name", tensor=name)
        seen.add(name_bytes)
        dtype = getattr(tensor, "dtype", None)
        if not isinstance(dtype, DType):
            raise AprError(ErrorCode.ARGUMENT, "tensor dtype must be an apr_core DType",
                           tensor=name, dtype=dtype)
        dtype_id = apr_id_for_write(dtype)
        shape = check_shape(name, dtype, getattr(tensor, "shape", None))
        items.append(PlannedTensor(name_bytes, tensor, dtype, dtype_id, shape,
                                   dtype.nbytes(shape)))
    return items


def encode_metadata(metadata: dict) -> bytes:
    """The metadata section: JSON (ASCII), with "apr_version" added when absent."""
    if not isinstance(metadata, dict):
        raise AprError(ErrorCode.ARGUMENT, "metadata must be a dict",
                       type=type(metadata).__name__)
    meta = dict(metadata)
    meta.setdefault("apr_version", APR_VERSION_STRING)
    try:
        # allow_nan=False: NaN/Infinity are not JSON, and the browser's JSON.parse rejects
        # them. ensure_ascii keeps lone surrogates representable (as \udcxx escapes).
        text = json.dumps(meta, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise AprError(ErrorCode.ARGUMENT, "metadata is not JSON-serialisable: {}".format(exc))
    encoded = text.encode("ascii")
    if len(encoded) > DEFAULT_MAX_METADATA:
        raise AprError(ErrorCode.MEMORY, "metadata larger than readers accept",
                       metadata_size=len(encoded), limit=DEFAULT_MAX_METADATA)
    return encoded


def _write(handle: IO[bytes], plan: _Plan,
           encode: Callable[[PlannedTensor], Tuple[Any, int, int]],
           want_sha256: bool) -> WriteResult:
    index_offset = HEADER_SIZE + len(plan.metadata)
    handle.write(b"\0" * HEADER_SIZE)
    handle.write(plan.metadata)
    handle.write(b"\0" * (plan.data_offset - index_offset))  # index placeholder + padding
    entries: List[bytes] = []
    position = 0  # relative to data_offset, which is itself aligned
    compressed = False
    for item in plan.items:
        padding = align_up(position, plan.alignment) - position
        handle.write(b"\0" * padding)
        position += padding
        stored, raw_size, tensor_flags = encode(item)
        compressed = compressed or bool(tensor_flags & CODEC_MASK)
        handle.write(stored)
        entries.append(pack_entry(item.name_bytes, item.dtype_id, item.shape, position,
                                  len(stored), raw_size, tensor_flags))
        position += len(stored)
    header_flags = plan.flags | (F.COMPRESSED if compressed else 0)
    header = Header(MAGIC, VERSION_MAJOR, VERSION_MINOR, header_flags, HEADER_SIZE,
                    len(plan.metadata), index_offset, plan.index_size, plan.data_offset)
    body_size = plan.data_offset + position
    handle.seek(0)
    handle.write(header.pack())
    handle.seek(index_offset)
    handle.write(pack_index(entries))
    handle.flush()
    crc, digest = _read_back(handle, body_size, want_sha256)
    footer = Footer(crc, FOOTER_MAGIC, body_size + FOOTER_SIZE).pack()
    handle.seek(body_size)
    handle.write(footer)
    sha = None
    if digest is not None:
        digest.update(footer)
        sha = digest.hexdigest()
    return WriteResult(body_size + FOOTER_SIZE, crc, sha, len(plan.items), header_flags)


def _payload(item: PlannedTensor, codec: int, level: Optional[int]) -> Tuple[Any, int, int]:
    """(stored bytes, raw_size, per-tensor flags) for one tensor, validated."""
    data = item.tensor.load()
    try:
        view = memoryview(data).cast("B")
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "tensor load() must return bytes",
                       tensor=item.name_bytes.decode("utf-8"), type=type(data).__name__)
    if len(view) != item.nbytes:
        raise AprError(ErrorCode.ARGUMENT, "tensor payload size does not match its shape",
                       tensor=item.name_bytes.decode("utf-8"), got=len(view),
                       expected=item.nbytes, shape=item.shape)
    if codec != CODEC_NONE and item.nbytes:
        encoded = encode_blocks(view, codec, level)
        if len(encoded) < item.nbytes:
            return encoded, item.nbytes, codec
    return view, 0, CODEC_NONE  # written straight from the caller's buffer: no copy


def _read_back(handle: IO[bytes], size: int, want_sha256: bool) -> Tuple[int, Any]:
    """CRC32 (and optionally sha256) of the first `size` bytes of what was written."""
    digest = hashlib.sha256() if want_sha256 else None
    crc = 0
    handle.seek(0)
    remaining = size
    while remaining:
        chunk = handle.read(min(READBACK_CHUNK, remaining))
        if not chunk:
            raise AprError(ErrorCode.IO, "output shorter than written while checksumming",
                           missing=remaining)
        crc = zlib.crc32(chunk, crc)
        if digest is not None:
            digest.update(chunk)
        remaining -= len(chunk)
    return crc, digest


__all__ = ["write_apr2", "write_apr2_bytes", "rewrite_apr2", "parse_compression", "check_tensors",
           "encode_metadata", "PlannedTensor", "WriteResult"]
