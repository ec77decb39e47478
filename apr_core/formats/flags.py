"""THE APR v2 flag table (ARCHITECTURE §4 "Flags"): header bits and per-tensor bits.

Header bits 0-7 are seed 000 §3.3, bits 8-9 seed 002's source markers. Every module that
tests or sets a flag uses these names; nothing else spells out a bit value.
"""
from __future__ import annotations

from typing import List

from ..codecs import CODEC_MASK

COMPRESSED = 1 << 0       # at least one tensor payload is compressed
ALIGNED_64 = 1 << 1       # tensor payloads start on 64-byte boundaries
ALIGNED_32 = 1 << 2       # tensor payloads start on 32-byte boundaries (GGUF-compatible)
SHARDED = 1 << 3          # a manifest: tensors live in shard files named in the metadata
ENCRYPTED = 1 << 4        # tensor payloads are encrypted per tensor
SIGNED = 1 << 5           # a 96-byte signature block precedes the footer
QUANTIZED = 1 << 6        # at least one tensor has a block-quantized dtype
STREAMING = 1 << 7        # layout optimised for front-to-back streaming
SAFETENSORS_SRC = 1 << 8  # converted from SafeTensors
GGUF_SRC = 1 << 9         # converted from GGUF

HEADER_FLAGS = (
    ("COMPRESSED", COMPRESSED),
    ("ALIGNED_64", ALIGNED_64),
    ("ALIGNED_32", ALIGNED_32),
    ("SHARDED", SHARDED),
    ("ENCRYPTED", ENCRYPTED),
    ("SIGNED", SIGNED),
    ("QUANTIZED", QUANTIZED),
    ("STREAMING", STREAMING),
    ("SAFETENSORS_SRC", SAFETENSORS_SRC),
    ("GGUF_SRC", GGUF_SRC),
)
KNOWN_HEADER_FLAGS = 0
for _name, _bit in HEADER_FLAGS:
    KNOWN_HEADER_FLAGS |= _bit

# Per-tensor flags: bits 0-3 hold the codec id (apr_core.codecs); no other bit is defined.
TENSOR_CODEC_MASK = CODEC_MASK
KNOWN_TENSOR_FLAGS = TENSOR_CODEC_MASK

# Alignment a header declares, largest first (a file claiming both is treated as 64).
ALIGNMENT_FLAGS = ((64, ALIGNED_64), (32, ALIGNED_32))


def flag_names(flags: int) -> List[str]:
    """Names of the known header bits set in `flags`, plus `BIT<n>` for unknown ones."""
    names = [name for name, bit in HEADER_FLAGS if flags & bit]
    unknown = flags & ~KNOWN_HEADER_FLAGS
    names.extend("BIT{}".format(n) for n in range(32) if unknown >> n & 1)
    return names


def alignment_flag(alignment: int) -> int:
    """The header bit that declares `alignment` (32 or 64)."""
    for value, bit in ALIGNMENT_FLAGS:
        if value == alignment:
            return bit
    raise ValueError("no alignment flag for {}".format(alignment))


def declared_alignment(flags: int) -> int:
    """The alignment a header declares, or 0 when it declares none."""
    for value, bit in ALIGNMENT_FLAGS:
        if flags & bit:
            return value
    return 0


__all__ = [name for name, _ in HEADER_FLAGS] + [
    "HEADER_FLAGS", "KNOWN_HEADER_FLAGS", "TENSOR_CODEC_MASK", "KNOWN_TENSOR_FLAGS",
    "ALIGNMENT_FLAGS", "flag_names", "alignment_flag", "declared_alignment"]
