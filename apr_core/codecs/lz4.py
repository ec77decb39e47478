"""LZ4 *block* format codec: a pure-Python implementation plus a dispatcher to `lz4.block`.

The block format is the raw one `lz4.block.compress(data, store_size=False)` produces: a
sequence of (token, literals, offset, match) records ending with a literals-only record. The
raw size is not stored in the block, so the caller passes it in (APR keeps it in the framing).

`compress` / `decompress` are the pure-Python codec (stdlib only, so it runs in Pyodide and
WASI where the `lz4` extension is absent). `compress_block` / `decompress_block` use the `lz4`
package when it is importable and the pure codec otherwise; both sides read each other's output.

The decoder is strict where it matters for safety and exactness: offset 0 or reaching before
the output, literals or matches running past the input or `raw_size`, a truncated length, a
block that does not end right after a literals-only last sequence, and any output size other
than `raw_size` raise `AprError(ErrorCode.CORRUPT)`; the output buffer is never larger than
`raw_size`. Like the reference decoder's fast paths, it does not insist on the end-of-block
margins (last 5 bytes literal, last match 12 bytes before the end): those exist for the speed
of C decoders, every conforming encoder (this one included) keeps them, and refusing them
would reject blocks `lz4.block` accepts.
"""
from __future__ import annotations

from typing import Tuple, Union

from ..errors import AprError, ErrorCode
from . import checked_raw_size

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
_MAX_CMP = 1 << 12
# Entries kept in the match finder's table before it is reset; only matters for inputs far
# larger than a 64 KiB block, where it bounds memory at a small cost in ratio.
_TABLE_LIMIT = 1 << 18

HAVE_LZ4_PACKAGE = _lz4block is not None


def _corrupt(message: str, **context: object) -> AprError:
    return AprError(ErrorCode.CORRUPT, "LZ4 block: " + message, **context)


def check_raw_size(data_len: int, raw_size: int) -> int:
    """Validate `raw_size` against the compressed length before anything is allocated.

    Returns it as a plain int (index values parsed elsewhere may be int-like objects).
    """
    raw_size = checked_raw_size(raw_size, "LZ4 block")
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

    Compares slices of doubling size; in the first unequal pair, the lowest set bit of the
    XOR of the two little-endian integers locates the first differing byte. So a match costs
    a few C-level operations instead of one Python iteration per byte.
    """
    k = 0
    room = limit - b
    size = _FIRST_CMP
    while True:
        step = size if size < room - k else room - k
        if step <= 0:
            return k
        x = src[a + k:a + k + step]
        y = src[b + k:b + k + step]
        if x != y:
            diff = int.from_bytes(x, "little") ^ int.from_bytes(y, "little")
            return k + (((diff & -diff).bit_length() - 1) >> 3)
        k += step
        if size < _MAX_CMP:
            size <<= 1


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
        table = {}  # type: Dict[bytes, int]
        get = table.get
        from_bytes = int.from_bytes
        bounded = n > _TABLE_LIMIT
        pos = 0
        # Constants below are literals on purpose (global lookups cost in this loop):
        # 4 = MIN_MATCH, 65535 = MAX_OFFSET, 6 = _SKIP_TRIGGER, 64 = 1 << _SKIP_TRIGGER.
        misses = 64
        while pos <= match_start_limit:
            key = src[pos:pos + 4]
            cand = get(key, -65536)   # "never seen" reads as out of the offset window
            table[key] = pos
            if pos - cand > 65535:
                pos += misses >> 6
                misses += 1
                continue
            # Catch up: extend the match backwards over literals not yet emitted.
            while pos > anchor and cand > 0 and src[pos - 1] == src[cand - 1]:
                pos -= 1
                cand -= 1
            # Most matches are short: settle them with one 8-byte comparison inline.
            after = pos + 4
            if after + 8 <= match_end_limit:
                x = src[cand + 4:cand + 12]
                y = src[after:after + 8]
                if x != y:
                    diff = from_bytes(x, "little") ^ from_bytes(y, "little")
                    extra = ((diff & -diff).bit_length() - 1) >> 3
                else:
                    extra = 8 + _common_length(src, cand + 12, after + 8, match_end_limit)
            else:
                extra = _common_length(src, cand + 4, after, match_end_limit)
            literals = pos - anchor
            out.append(((15 if literals >= 15 else literals) << 4) | (15 if extra >= 15 else extra))
            if literals >= 15:
                _write_length(out, literals - 15)
            out += src[anchor:pos]
            offset = pos - cand
            out.append(offset & 0xFF)
            out.append(offset >> 8)
            if extra >= 15:
                _write_length(out, extra - 15)
            pos = after + extra
            anchor = pos
            misses = 64
            if bounded and len(table) > _TABLE_LIMIT:
                table.clear()
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
    try:
        out = bytearray(raw_size)
    except MemoryError:
        raise AprError(ErrorCode.MEMORY, "LZ4 output buffer could not be allocated",
                       raw_size=raw_size) from None
    # Writes go through a memoryview: matches copy without a temporary, and a view cannot
    # resize the buffer, so even a missed bounds check could not grow it past raw_size.
    view = memoryview(out)
    offset_limit = n - 2   # the 2 offset bytes must lie inside the input
    ip = 0
    op = 0
    # One iteration per sequence. Constants are literals (15 = length nibble escape, 4 =
    # MIN_MATCH, 19 = both) because global lookups cost in the hottest loop of the codec.
    while True:
        token = src[ip]
        ip += 1
        length = token >> 4
        if length:
            if length == 15:
                ip, length = _read_length(src, ip, n, 15)
            end = ip + length
            out_end = op + length
            if end > n or out_end > raw_size:
                raise _corrupt("literals run past the input or the raw size", position=ip,
                               length=length, raw_size=raw_size)
            view[op:out_end] = src[ip:end]
            ip = end
            op = out_end
        if ip == n:
            if op != raw_size:
                raise _corrupt("decoded size differs from raw size", decoded=op,
                               raw_size=raw_size)
            return bytes(out)
        if ip > offset_limit:
            raise _corrupt("truncated match offset", position=ip)
        offset = src[ip] | (src[ip + 1] << 8)
        ip += 2
        if not 0 < offset <= op:
            raise _corrupt("match offset outside the output", position=ip, offset=offset,
                           output=op)
        length = (token & 15) + 4
        if length == 19:
            ip, length = _read_length(src, ip, n, 19)
        out_end = op + length
        if out_end > raw_size:
            raise _corrupt("match runs past raw size", position=ip, length=length,
                           output=op, raw_size=raw_size)
        start = op - offset
        if offset >= length:
            view[op:out_end] = view[start:start + length]
        else:
            # Overlapping copy: the match repeats the last `offset` bytes; build the run
            # from whole copies of that pattern plus a partial one, in C.
            pattern = out[start:op]
            count, rest = divmod(length, offset)
            mid = op + count * offset
            view[op:mid] = pattern * count
            if rest:
                view[mid:out_end] = pattern[:rest]
        op = out_end
        if ip >= n:
            # The last sequence must be literals only.
            raise _corrupt("block ends after a match", position=ip)


def _read_length(src: bytes, ip: int, n: int, length: int) -> Tuple[int, int]:
    """Add the 255-run length extension at `src[ip:]` to `length`; return (ip, length)."""
    while True:
        if ip >= n:
            raise _corrupt("truncated length extension", position=ip)
        byte = src[ip]
        ip += 1
        length += byte
        if byte != 255:
            return ip, length


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
