"""APR v2 per-tensor block framing (ARCHITECTURE §4 "Compression").

A compressed tensor payload is a sequence of blocks, one per `BLOCK_SIZE` (64 KiB) slice of the
raw bytes; every block but the last holds exactly `BLOCK_SIZE` raw bytes. Each block is

    u32 LE stored_len | stored_len & 0x7FFFFFFF bytes

where the high bit of `stored_len` (`RAW_BLOCK_FLAG`) marks a block stored uncompressed because
compression did not shrink it. Blocks are independent, so a loader can stream a tensor and
decompress it block by block (`iter_decode_blocks`).

The block structure is validated in full (count, lengths, trailing bytes, raw-block sizes)
before anything is decompressed or yielded; any violation raises `AprError(CORRUPT)`.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterator, List, Optional, Tuple, Union

from ..errors import AprError, ErrorCode
from . import BLOCK_SIZE, CODEC_LZ4, CODEC_NAMES, CODEC_NONE, CODEC_ZSTD, checked_raw_size
from . import lz4 as _lz4
from . import zstd as _zstd

BytesLike = Union[bytes, bytearray, memoryview]

RAW_BLOCK_FLAG = 0x80000000
BLOCK_LEN_MASK = 0x7FFFFFFF
BLOCK_HEADER_SIZE = 4
_U32 = struct.Struct("<I")

CompressFn = Callable[[BytesLike, Optional[int]], bytes]
DecompressFn = Callable[[BytesLike, int], bytes]


def _none_compress(data: BytesLike, level: Optional[int]) -> bytes:
    return bytes(data)


def _none_decompress(data: BytesLike, raw_size: int) -> bytes:
    if len(data) != raw_size:
        raise AprError(ErrorCode.CORRUPT, "uncompressed block has the wrong length",
                       length=len(data), raw_size=raw_size)
    return bytes(data)


def _lz4_compress(data: BytesLike, level: Optional[int]) -> bytes:
    # LZ4 block compression has no level in APR: one fast mode, readable by every reader.
    return _lz4.compress_block(data)


def _zstd_compress(data: BytesLike, level: Optional[int]) -> bytes:
    return _zstd.compress(data, level)


# The one table of codecs: id -> (compress(data, level), decompress(data, raw_size)).
CODECS = {
    CODEC_NONE: (_none_compress, _none_decompress),
    CODEC_LZ4: (_lz4_compress, _lz4.decompress_block),
    CODEC_ZSTD: (_zstd_compress, _zstd.decompress),
}  # type: Dict[int, Tuple[CompressFn, DecompressFn]]


def _codec(codec: int) -> Tuple[CompressFn, DecompressFn]:
    try:
        return CODECS[codec]
    except (KeyError, TypeError):
        raise AprError(ErrorCode.UNSUPPORTED, "unknown compression codec id", codec=codec,
                       known=sorted(CODEC_NAMES.items())) from None


def compress(codec: int, data: BytesLike, level: Optional[int] = None) -> bytes:
    """Compress one block with codec `codec` (CODEC_NONE returns the bytes unchanged).

    `level` is used by zstd (None = its default) and ignored by the other codecs.
    """
    return _codec(codec)[0](data, level)


def decompress(codec: int, data: BytesLike, raw_size: int) -> bytes:
    """Decompress one block that must expand to exactly `raw_size` bytes."""
    return _codec(codec)[1](data, raw_size)


def _check_raw_size(raw_size: int) -> int:
    return checked_raw_size(raw_size, "block framing")


def block_count(raw_size: int) -> int:
    """Number of blocks a tensor of `raw_size` bytes is framed into."""
    return (raw_size + BLOCK_SIZE - 1) // BLOCK_SIZE


def encode_blocks(data: BytesLike, codec: int, level: Optional[int] = None) -> bytes:
    """Frame `data` as independent blocks compressed with `codec`.

    A block whose compressed form is not smaller than its raw bytes is stored raw (with
    `RAW_BLOCK_FLAG`), so a payload never grows by more than 4 bytes per 64 KiB.
    """
    compress_one = _codec(codec)[0]
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    parts = []  # type: List[bytes]
    for start in range(0, len(view), BLOCK_SIZE):
        chunk = view[start:start + BLOCK_SIZE]
        packed = compress_one(chunk, level)
        if len(packed) < len(chunk):
            parts.append(_U32.pack(len(packed)))
            parts.append(packed)
        else:
            parts.append(_U32.pack(len(chunk) | RAW_BLOCK_FLAG))
            parts.append(bytes(chunk))
    return b"".join(parts)


def scan_blocks(payload: BytesLike, raw_size: int) -> List[Tuple[int, int, bool, int]]:
    """Validate the block structure; return (start, stored_len, is_raw, block_raw_size) per block.

    Only the framing is checked here (nothing is decompressed), so the checks are cheap and
    run before any output buffer exists.
    """
    raw_size = _check_raw_size(raw_size)
    total = len(payload)
    count = block_count(raw_size)
    # Every block needs its 4-byte header and at least one byte: refuse a raw_size the
    # payload cannot possibly hold before building a per-block list of that length.
    if total < count * (BLOCK_HEADER_SIZE + 1):
        raise AprError(ErrorCode.CORRUPT, "payload too short for the raw size",
                       payload_size=total, raw_size=raw_size, blocks=count)
    blocks = []  # type: List[Tuple[int, int, bool, int]]
    pos = 0
    for index in range(count):
        expected = BLOCK_SIZE if index < count - 1 else raw_size - BLOCK_SIZE * index
        if pos + BLOCK_HEADER_SIZE > total:
            raise AprError(ErrorCode.CORRUPT, "truncated block header", block=index,
                           offset=pos, payload_size=total)
        stored = _U32.unpack_from(payload, pos)[0]
        pos += BLOCK_HEADER_SIZE
        is_raw = bool(stored & RAW_BLOCK_FLAG)
        length = stored & BLOCK_LEN_MASK
        if is_raw and length != expected:
            raise AprError(ErrorCode.CORRUPT, "raw block has the wrong length", block=index,
                           length=length, expected=expected)
        if length == 0:
            raise AprError(ErrorCode.CORRUPT, "empty compressed block", block=index)
        if pos + length > total:
            raise AprError(ErrorCode.CORRUPT, "block runs past the payload", block=index,
                           offset=pos, length=length, payload_size=total)
        blocks.append((pos, length, is_raw, expected))
        pos += length
    if pos != total:
        raise AprError(ErrorCode.CORRUPT, "trailing bytes after the last block",
                       trailing=total - pos, blocks=count)
    return blocks


def iter_decode_blocks(payload: BytesLike, codec: int, raw_size: int) -> Iterator[bytes]:
    """Yield the raw bytes of each block in order (at most `BLOCK_SIZE` bytes each).

    The whole framing is validated before the first chunk is yielded; a block whose contents
    fail to decompress raises `AprError(CORRUPT)` when it is reached.
    """
    decompress_one = _codec(codec)[1]
    view = payload if isinstance(payload, bytes) else memoryview(payload).cast("B")
    blocks = scan_blocks(view, raw_size)
    return _decode_each(view, blocks, decompress_one)


def _decode_each(view: BytesLike, blocks: List[Tuple[int, int, bool, int]],
                 decompress_one: DecompressFn) -> Iterator[bytes]:
    # A separate generator so that iter_decode_blocks validates eagerly, at call time.
    for index, (start, length, is_raw, expected) in enumerate(blocks):
        stored = view[start:start + length]
        if is_raw:
            yield bytes(stored)
            continue
        try:
            chunk = decompress_one(stored, expected)
        except AprError as exc:
            exc.context.setdefault("block", index)
            raise
        yield chunk


def decode_blocks(payload: BytesLike, codec: int, raw_size: int) -> bytes:
    """Decode a whole framed payload to exactly `raw_size` bytes."""
    chunks = list(iter_decode_blocks(payload, codec, raw_size))
    if len(chunks) == 1:
        return chunks[0]
    try:
        return b"".join(chunks)
    except MemoryError:
        raise AprError(ErrorCode.MEMORY, "decoded tensor could not be allocated",
                       raw_size=raw_size) from None
