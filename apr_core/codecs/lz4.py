"""LZ4 *block* format codec: a pure-Python implementation plus a dispatcher to `lz4.block`.

The block format is the raw one `lz4.block.compress(data, store_size=False)` produces: a
sequence of (token, literals, offset, match) records ending with a literals-only record. The
raw size is not stored in the block, so the caller passes it in (APR keeps it in the framing).

`compress` / `decompress` are the pure-Python codec (stdlib only, so it runs in Pyodide and
WASI where the `lz4` extension is absent). `compress_block` / `decompress_block` use the `lz4`
package when it is importable and the pure codec otherwise; both sides read each other's output.

The decoder is strict: it enforces the end-of-block rules of the LZ4 block specification (the
last 5 bytes are literals, the last match starts at least 12 bytes before the end, the block
ends right after the last literals) and rejects offset 0, so every block it accepts is also
accepted by the reference decoder with the same output. Any malformed input raises
`AprError(ErrorCode.CORRUPT)`; the output buffer is never larger than `raw_size`.
"""
from __future__ import annotations

import operator
import sys
from typing import Union

from ..errors import AprError, ErrorCode

try:  # The C extension is an accelerator only; apr_core never requires it.
    import lz4.block as _lz4block
except ImportError:  # pragma: no cover - depends on the environment
    _lz4block = None

BytesLike = Union[bytes, bytearray, memoryview]

MIN_MATCH = 4        # shortest match the format can express (match length nibble 0)
LAST_LITERALS = 5    # the last 5 bytes of a block are always literals
MF_LIMIT = 12        # a match may not start within the last 12 bytes of a block
MAX_OFFSET = 0xFFFF  # offsets are 16-bit
# Each input byte decodes to at most 255 output bytes (a 0xFF length-extension byte), so a
# `raw_size` beyond 255 * len(data) cannot be right and is refused before any allocation.
MAX_EXPANSION = 255

# Compressor tuning: after 2**_SKIP_TRIGGER consecutive misses the scan step grows by one, as
# in the reference compressor, so incompressible data is skipped over quickly.
_SKIP_TRIGGER = 6
# Matches are extended by comparing slices of growing length instead of byte by byte.
_FIRST_CMP = 8
_MAX_CMP = 1 << 16

HAVE_LZ4_PACKAGE = _lz4block is not None


def _corrupt(message: str, **context: object) -> AprError:
    return AprError(ErrorCode.CORRUPT, "LZ4 block: " + message, **context)


def check_raw_size(data_len: int, raw_size: int) -> int:
    """Validate `raw_size` against the compressed length before anything is allocated.

    Returns it as a plain int (index values parsed elsewhere may be int-like objects).
    """
    try:
        raw_size = operator.index(raw_size)
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "raw_size must be an integer",
                       raw_size=repr(raw_size)) from None
    if raw_size < 0:
        raise _corrupt("negative raw size", raw_size=raw_size)
    if raw_size > sys.maxsize:
        raise AprError(ErrorCode.MEMORY, "LZ4 raw size exceeds this platform's address space",
                       raw_size=raw_size, limit=sys.maxsize)
    if raw_size > MAX_EXPANSION * data_len:
        raise _corrupt("raw size impossible for the compressed length",
                       raw_size=raw_size, compressed_size=data_len)
    return raw_size


# --------------------------------------------------------------------------------------------
# Compression


def _write_length(out: bytearray, value: int) -> None:
    """Append a length extension: 255-bytes while >= 255, then the remainder."""
    if value >= 255:
        count, value = divmod(value, 255)
        out += b"\xff" * count
    out.append(value)


def _common_length(src: bytes, a: int, b: int, limit: int) -> int:
    """Number of equal bytes at `src[a:]` and `src[b:]` (a < b) without reading past `limit`.

    Compares slices of doubling size, then bisects the first unequal slice: a handful of
    C-level comparisons per match instead of one Python iteration per byte.
    """
    k = 0
    room = limit - b
    size = _FIRST_CMP
    while True:
        step = size if size < room - k else room - k
        if step <= 0:
            return k
        if src[a + k:a + k + step] != src[b + k:b + k + step]:
            break
        k += step
        if size < _MAX_CMP:
            size <<= 1
    # The first difference lies in [k, k + step); halve the window until it is one byte.
    while step > 1:
        half = step >> 1
        if src[a + k:a + k + half] == src[b + k:b + k + half]:
            k += half
            step -= half
        else:
            step = half
    return k


def compress(data: BytesLike) -> bytes:
    """Compress `data` into one LZ4 block (greedy, hash-table match finder).

    The output follows the end-of-block rules, so `lz4.block.decompress` reads it.
    """
    src = bytes(data)
    n = len(src)
    out = bytearray()
    anchor = 0
    if n > MF_LIMIT:
        match_start_limit = n - MF_LIMIT      # last position a match may start at
        match_end_limit = n - LAST_LITERALS   # matches end at or before this
        # Keyed by the 4-byte sequence itself: a hit is a verified 4-byte match, and dict
        # hashing of short bytes is cheaper in Python than computing a rolling hash.
        table = {}
        get = table.get
        pos = 0
        misses = 1 << _SKIP_TRIGGER
        while pos <= match_start_limit:
            key = src[pos:pos + MIN_MATCH]
            cand = get(key)
            table[key] = pos
            if cand is None or pos - cand > MAX_OFFSET:
                pos += misses >> _SKIP_TRIGGER
                misses += 1
                continue
            # Catch up: extend the match backwards over literals not yet emitted.
            while pos > anchor and cand > 0 and src[pos - 1] == src[cand - 1]:
                pos -= 1
                cand -= 1
            length = MIN_MATCH + _common_length(src, cand + MIN_MATCH, pos + MIN_MATCH,
                                                match_end_limit)
            literals = pos - anchor
            extra = length - MIN_MATCH
            out.append(((15 if literals >= 15 else literals) << 4) | (15 if extra >= 15 else extra))
            if literals >= 15:
                _write_length(out, literals - 15)
            out += src[anchor:pos]
            offset = pos - cand
            out.append(offset & 0xFF)
            out.append(offset >> 8)
            if extra >= 15:
                _write_length(out, extra - 15)
            pos += length
            anchor = pos
            misses = 1 << _SKIP_TRIGGER
            # Index a position inside the match so the next scan can chain onto it.
            table[src[pos - 2:pos + 2]] = pos - 2
    literals = n - anchor
    out.append((15 if literals >= 15 else literals) << 4)
    if literals >= 15:
        _write_length(out, literals - 15)
    out += src[anchor:]
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Decompression


def decompress(data: BytesLike, raw_size: int) -> bytes:
    """Decode one LZ4 block that must expand to exactly `raw_size` bytes.

    Raises `AprError(CORRUPT)` on any malformed input (see the module docstring).
    """
    src = data if isinstance(data, bytes) else bytes(data)
    n = len(src)
    raw_size = check_raw_size(n, raw_size)
    if n == 0:
        raise _corrupt("empty block")
    if raw_size == 0:
        # The only valid encoding of nothing is a single zero token.
        if src != b"\x00":
            raise _corrupt("non-empty block for zero raw size", compressed_size=n)
        return b""
    out = bytearray(raw_size)
    literal_end_limit = raw_size - MF_LIMIT   # a match never starts after this output position
    match_end_limit = raw_size - LAST_LITERALS
    input_limit = n - 8   # a non-final record needs 2 offset bytes + a token + 5 literals
    ip = 0
    op = 0
    while True:
        token = src[ip]
        ip += 1
        length = token >> 4
        if length:
            if length == 15:
                while True:
                    if ip >= n:
                        raise _corrupt("truncated literal length", position=ip)
                    byte = src[ip]
                    ip += 1
                    length += byte
                    if byte != 255:
                        break
            end = ip + length
            out_end = op + length
            if end > n:
                raise _corrupt("literals run past the input", position=ip, length=length)
            if out_end > raw_size:
                raise _corrupt("literals run past raw size", position=ip, length=length,
                               raw_size=raw_size)
            out[op:out_end] = src[ip:end]
            ip = end
            op = out_end
        if ip == n:
            if op != raw_size:
                raise _corrupt("decoded size differs from raw size", decoded=op,
                               raw_size=raw_size)
            return bytes(out)
        if op > literal_end_limit or ip > input_limit:
            raise _corrupt("match within the end-of-block margin", position=ip, output=op)
        offset = src[ip] | (src[ip + 1] << 8)
        ip += 2
        if offset == 0 or offset > op:
            raise _corrupt("match offset outside the output", position=ip, offset=offset,
                           output=op)
        length = token & 15
        if length == 15:
            while True:
                if ip >= n:
                    raise _corrupt("truncated match length", position=ip)
                byte = src[ip]
                ip += 1
                length += byte
                if byte != 255:
                    break
        length += MIN_MATCH
        out_end = op + length
        if out_end > match_end_limit:
            raise _corrupt("match runs into the last literals", position=ip, length=length,
                           output=op, raw_size=raw_size)
        start = op - offset
        if offset >= length:
            out[op:out_end] = out[start:start + length]
        else:
            # Overlapping copy: the match repeats the last `offset` bytes; build the run
            # from whole copies of that pattern plus a partial one, in C.
            pattern = out[start:op]
            count, rest = divmod(length, offset)
            mid = op + count * offset
            out[op:mid] = pattern * count
            if rest:
                out[mid:out_end] = pattern[:rest]
        op = out_end
        if ip >= n:
            raise _corrupt("block ends after a match", position=ip)


# --------------------------------------------------------------------------------------------
# Dispatch to the `lz4` package when present


def compress_block(data: BytesLike) -> bytes:
    """Compress one block with `lz4.block` when importable, else with the pure codec."""
    if _lz4block is not None:
        return _lz4block.compress(data, store_size=False)
    return compress(data)


def decompress_block(data: BytesLike, raw_size: int) -> bytes:
    """Decompress one block to exactly `raw_size` bytes, via `lz4.block` when importable.

    The size checks run before the package allocates its `raw_size` output buffer.
    """
    if _lz4block is None:
        return decompress(data, raw_size)
    n = len(data)
    raw_size = check_raw_size(n, raw_size)
    if raw_size == 0:
        # Handled here so both back ends agree on the one valid empty block.
        return decompress(data, raw_size)
    try:
        result = _lz4block.decompress(data, uncompressed_size=raw_size)
    except MemoryError:
        raise AprError(ErrorCode.MEMORY, "LZ4 output buffer could not be allocated",
                       raw_size=raw_size) from None
    except (_lz4block.LZ4BlockError, ValueError, OverflowError) as exc:
        raise _corrupt(str(exc), compressed_size=n, raw_size=raw_size) from None
    if len(result) != raw_size:
        # lz4.block treats uncompressed_size as a capacity; APR needs the exact size.
        raise _corrupt("decoded size differs from raw size", decoded=len(result),
                       raw_size=raw_size)
    return result
