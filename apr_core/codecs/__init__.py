"""Compression codecs for APR v2 tensor payloads (ARCHITECTURE §4 "Compression").

The per-tensor codec id lives in bits 0-3 of an APR index entry's flags. A compressed payload
is a sequence of independent blocks of at most `BLOCK_SIZE` raw bytes, framed by
`framing.encode_blocks` / `framing.decode_blocks`.
"""
from __future__ import annotations

CODEC_NONE = 0
CODEC_LZ4 = 1
CODEC_ZSTD = 2
CODEC_MASK = 0x0F

CODEC_NAMES = {CODEC_NONE: "none", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

BLOCK_SIZE = 64 * 1024
