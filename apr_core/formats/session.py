"""APR session files (`.aprs`): a conversation's token ids and KV cache, saved to resume it.

    data = encode_session(metadata, tokens, kv_parts)     # bytes, or write_session(handle, ...)
    saved = decode_session(data)                          # validated: .metadata .tokens .kv

Layout (all integers little-endian), in the manner of APR v2:

    header   32 bytes  b"APRS", u16 major=1, u16 minor=0, u32 flags=0, u32 metadata_size,
                       u64 data_offset (a multiple of 64), u64 data_size
    metadata           JSON (UTF-8): the model's sha256, KV type, context, geometry
                       (n_layers, n_kv_heads, head_dim, row_bytes), n_tokens, "extra"
    padding            zeros up to data_offset
    data               token ids int32 [n_tokens], zeros up to a multiple of 64, then per
                       layer K rows [n_kv_heads, n_tokens, row_bytes] and V rows likewise,
                       in the KV type as the cache stores them (f16, q8_0 blocks, ...)
    footer   16 bytes  u32 crc32 of every byte before it, b"SRPA", u64 file size

The reader checks the footer (size: a truncated file), then the CRC (a corrupted one),
then the header and the metadata's arithmetic against `data_size`, all before it hands
out anything: a session is never half-loaded. Which model and settings the session fits
is the runtime's question (`apr_core.runtime.kv_session`); this module is bytes only.
"""
from __future__ import annotations

import json
import struct
import zlib
from typing import Any, Dict, Iterable, List, NamedTuple

from ..errors import AprError, ErrorCode

MAGIC = b"APRS"
FOOTER_MAGIC = b"SRPA"
VERSION_MAJOR = 1
VERSION_MINOR = 0
FORMAT_NAME = "apr-session"
HEADER = struct.Struct("<4sHHIIQQ")      # 32 bytes
FOOTER = struct.Struct("<I4sQ")          # 16 bytes
ALIGN = 64
MAX_METADATA = 64 << 20
# metadata keys that must be non-negative integers (the data section's geometry)
GEOMETRY = ("n_tokens", "n_layers", "n_kv_heads", "head_dim", "row_bytes", "context")


class SessionData(NamedTuple):
    """A decoded session: its metadata, token ids and the KV section (bytes-like, per
    layer K then V, each `[n_kv_heads, n_tokens, row_bytes]`)."""
    metadata: Dict[str, Any]
    tokens: List[int]
    kv: memoryview


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def kv_size(meta: Dict[str, Any]) -> int:
    """Bytes of the KV section the metadata describes."""
    return 2 * meta["n_layers"] * meta["n_kv_heads"] * meta["n_tokens"] * meta["row_bytes"]


def data_size(meta: Dict[str, Any]) -> int:
    """Bytes of the data section: token ids, padding, KV."""
    return _align(4 * meta["n_tokens"]) + kv_size(meta)


def write_session(handle: Any, metadata: Dict[str, Any], tokens: Iterable[int],
                  kv_parts: Iterable[Any]) -> int:
    """Write a session to the binary file `handle` (K and V of each layer in order as
    bytes-like `kv_parts`); the bytes written. AprError(ARGUMENT) when the parts do not
    add up to what `metadata` says."""
    meta = dict(metadata, format=FORMAT_NAME)
    ids = [int(t) for t in tokens]
    meta["n_tokens"] = len(ids)
    _check_geometry(meta, ErrorCode.ARGUMENT)
    blob = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("utf-8")
    data_offset = _align(HEADER.size + len(blob))
    size = data_size(meta)
    head = HEADER.pack(MAGIC, VERSION_MAJOR, VERSION_MINOR, 0, len(blob), data_offset, size)
    crc = 0
    written = 0

    def put(chunk: Any) -> None:
        nonlocal crc, written
        handle.write(chunk)
        crc = zlib.crc32(chunk, crc)
        written += len(chunk)

    put(head)
    put(blob)
    put(bytes(data_offset - written))
    put(struct.pack("<{}i".format(len(ids)), *ids))
    put(bytes(_align(4 * len(ids)) - 4 * len(ids)))
    for part in kv_parts:
        put(memoryview(part).cast("B"))
    if written != data_offset + size:
        raise AprError(ErrorCode.ARGUMENT, "session KV bytes do not match its metadata",
                       expected=data_offset + size, written=written)
    handle.write(FOOTER.pack(crc & 0xFFFFFFFF, FOOTER_MAGIC, written + FOOTER.size))
    return written + FOOTER.size


def encode_session(metadata: Dict[str, Any], tokens: Iterable[int],
                   kv_parts: Iterable[Any]) -> bytes:
    """The session file's bytes (`write_session` into memory)."""
    import io
    buffer = io.BytesIO()
    write_session(buffer, metadata, tokens, kv_parts)
    return buffer.getvalue()


def decode_session(data: Any, source: str = "<bytes>") -> SessionData:
    """Validate and decode a whole session file's bytes. E001 not a session, E002
    truncated or inconsistent, E003 another major version, E004 checksum mismatch."""
    view = memoryview(data).cast("B")
    total = len(view)
    if bytes(view[:4]) != MAGIC[:min(total, 4)]:
        raise AprError(ErrorCode.FORMAT, "not an APR session file", source=source,
                       magic=bytes(view[:4]).hex())
    if total < HEADER.size + FOOTER.size:
        raise AprError(ErrorCode.CORRUPT, "session file is truncated", source=source,
                       size=total)
    crc, footer_magic, recorded = FOOTER.unpack_from(view, total - FOOTER.size)
    if footer_magic != FOOTER_MAGIC or recorded != total:
        raise AprError(ErrorCode.CORRUPT, "session file is truncated or has bytes appended "
                       "(its footer does not match its size)", source=source, size=total,
                       recorded_size=recorded if footer_magic == FOOTER_MAGIC else None)
    _, major, minor, _flags, meta_size, data_offset, size = HEADER.unpack_from(view, 0)
    if major != VERSION_MAJOR:
        raise AprError(ErrorCode.VERSION, "unsupported session file version", source=source,
                       version="{}.{}".format(major, minor), supported=VERSION_MAJOR)
    actual = zlib.crc32(view[:total - FOOTER.size]) & 0xFFFFFFFF
    if actual != crc:
        raise AprError(ErrorCode.CHECKSUM, "session file is corrupted (CRC32 mismatch)",
                       source=source, expected="{:08x}".format(crc),
                       actual="{:08x}".format(actual))
    if meta_size > MAX_METADATA or HEADER.size + meta_size > data_offset or \
            data_offset % ALIGN or data_offset + size != total - FOOTER.size:
        raise AprError(ErrorCode.CORRUPT, "session header sections do not fit the file",
                       source=source, metadata_size=meta_size, data_offset=data_offset,
                       data_size=size, size=total)
    meta = _metadata(view[HEADER.size:HEADER.size + meta_size], source)
    if data_size(meta) != size:
        raise AprError(ErrorCode.CORRUPT, "session data size does not match its metadata",
                       source=source, data_size=size, expected=data_size(meta))
    n = meta["n_tokens"]
    tokens = list(struct.unpack_from("<{}i".format(n), view, data_offset))
    kv = view[data_offset + _align(4 * n):data_offset + size]
    return SessionData(meta, tokens, kv)


def _metadata(raw: memoryview, source: str) -> Dict[str, Any]:
    try:
        meta = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise AprError(ErrorCode.CORRUPT, "session metadata is not JSON", source=source,
                       error=str(err))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise AprError(ErrorCode.CORRUPT, "session metadata names another format",
                       source=source)
    _check_geometry(meta, ErrorCode.CORRUPT)
    return meta


def _check_geometry(meta: Dict[str, Any], code: ErrorCode) -> None:
    for key in GEOMETRY:
        value = meta.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AprError(code, "session metadata needs a non-negative integer", key=key,
                           value=repr(value))


__all__ = ["MAGIC", "FOOTER_MAGIC", "VERSION_MAJOR", "VERSION_MINOR", "SessionData",
           "write_session", "encode_session", "decode_session",
           "data_size", "kv_size"]
