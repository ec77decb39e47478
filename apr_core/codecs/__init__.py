"""Compression codecs for APR v2 tensor payloads (ARCHITECTURE §4 "Compression").

The per-tensor codec id lives in bits 0-3 of an APR index entry's flags. A compressed payload
is a sequence of independent blocks of at most `BLOCK_SIZE` raw bytes, framed by
`framing.encode_blocks` / `framing.decode_blocks`.
"""
from __future__ import annotations

import operator
import sys

from ..errors import AprError, ErrorCode

CODEC_NONE = 0
CODEC_LZ4 = 1
CODEC_ZSTD = 2
CODEC_MASK = 0x0F

CODEC_NAMES = {CODEC_NONE: "none", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

BLOCK_SIZE = 64 * 1024


def checked_raw_size(raw_size: int, codec: str) -> int:
    """`raw_size` as a plain int, refused before allocation when negative or unaddressable."""
    try:
        raw_size = operator.index(raw_size)
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "raw_size must be an integer",
                       raw_size=repr(raw_size)) from None
    if raw_size < 0:
        raise AprError(ErrorCode.CORRUPT, "{}: negative raw size".format(codec),
                       raw_size=raw_size)
    if raw_size > sys.maxsize:
        raise AprError(ErrorCode.MEMORY,
                       "{} raw size exceeds this platform's address space".format(codec),
                       raw_size=raw_size, limit=sys.maxsize)
    return raw_size
