"""Format detection by magic bytes (ARCHITECTURE §2: the first bytes decide, never the name)."""
from __future__ import annotations

import struct

from ..errors import AprError, ErrorCode
from ..io import ByteSource

APR2 = "apr2"
APR1 = "apr1"
GGUF = "gguf"
SAFETENSORS = "safetensors"

# magic -> format; SafeTensors has no magic and is recognised by its header shape below.
MAGICS = {b"APR2": APR2, b"APRN": APR1, b"GGUF": GGUF}


def detect_bytes(head: bytes, total_size: int) -> str:
    """Name the format of data starting with `head` (at least 9 bytes when available)."""
    fmt = MAGICS.get(bytes(head[:4]))
    if fmt is not None:
        return fmt
    if len(head) >= 9:
        # SafeTensors: u64 LE header length, then a JSON object opening with "{".
        (header_len,) = struct.unpack("<Q", bytes(head[:8]))
        if 2 <= header_len <= total_size - 8 and head[8:9] == b"{":
            return SAFETENSORS
    if bytes(head[:4]) == b"FUGG":
        raise AprError(ErrorCode.UNSUPPORTED, "big-endian GGUF is not supported")
    raise AprError(ErrorCode.FORMAT, "unknown file format (not APR, GGUF or SafeTensors)",
                   magic=bytes(head[:8]).hex())


def detect_format(source: ByteSource) -> str:
    """Read at most 9 bytes of `source` and name its format."""
    if source.size < 4:
        raise AprError(ErrorCode.FORMAT, "file too small to be a model", size=source.size)
    head = source.read(0, min(9, source.size))
    return detect_bytes(head, source.size)
