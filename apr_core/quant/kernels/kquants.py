"""k-quants (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.

Block layouts (ggml-common.h, QK_K = 256; multi-byte fields little-endian):
  Q2_K  84 B: u8 scales[16] (lo nibble scale, hi nibble min), u8 qs[64], f16 d, f16 dmin
  Q3_K 110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6 bit), f16 d
  Q4_K 144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale + 8 x 6-bit min), u8 qs[128]
  Q5_K 176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
  Q6_K 210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
  Q8_K 292 B: f32 d, i8 qs[256], i16 bsums[16]

Element order. The 2-bit fields (Q2_K, Q3_K's low bits, Q6_K's high bits) walk 32-byte
groups: element `128 h + 32 j + l` is bits `2j..2j+1` of byte `32 h + l`. The 4-bit fields
walk 32-byte groups too: element `64 c + l` is the low nibble of byte `32 c + l`, element
`64 c + 32 + l` its high nibble. A single high bit (Q3_K hmask, Q5_K qh) for element
`32 s + l` is bit `s` of byte `l`. Sub-block scales apply to consecutive runs of 16
(Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K) elements.

Float ops follow ggml/gguf-py exactly: per-sub-block `dl = d * sc` (and `ml = dmin * m`)
in float32, then `dl * q` (minus `ml`), each rounded once in float32. The unpacking uses
the whole-block `planes` + 32-byte record copies explained in `legacy`.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..registry import register
from .floats import field, float_field, half_field
from .legacy import (NIBBLE_SHIFTS, byte_range, fields, gather_runs, nibble_codes, planes,
                     records, scaled, unpack)

CRUMB_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)   # 2-bit fields
BIT_SHIFTS = np.arange(8, dtype=np.uint8)               # 1-bit fields


def crumb_codes(blocks: np.ndarray, offset: int, groups: int) -> np.ndarray:
    """`groups` x 32 bytes of 2-bit fields at `offset` -> `[n, groups, 4, 32]` codes 0..3.

    `[:, h, j, l]` is bits `2j..2j+1` of byte `offset + 32 h + l`.
    """
    return unpack(blocks, offset, groups, 32, CRUMB_SHIFTS, 0x03)


def bit_codes(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The 32 bytes at `offset` -> `[n, 8, 32]` of 0/1: `[:, s, l]` is bit s of byte l."""
    return unpack(blocks, offset, 1, 32, BIT_SHIFTS, 0x01).reshape(-1, 8, 32)


def _min_scaled(scale: np.ndarray, codes: np.ndarray, mins: np.ndarray,
                out: Optional[np.ndarray]) -> np.ndarray:
    """`scale * q - mins` per sub-block: `[n, g, k]` codes, `[n, g, 1]` scale and mins."""
    out = scaled(scale, codes, out, (codes.shape[0], 256))
    view = out.reshape(codes.shape)
    np.subtract(view, mins, out=view)
    return out


@register("dequantize", "Q2_K")
def dequantize_q2_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q2_K `[n, 84]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    scales = blocks[:, 0:16]                                   # [n, 16] u8
    dl = scaled(half_field(blocks, 80), scales & np.uint8(0x0F), None, (n, 16))
    ml = scaled(half_field(blocks, 82), scales >> np.uint8(4), None, (n, 16))
    codes = crumb_codes(blocks, 16, 2).reshape(n, 16, 16)      # 16 sub-blocks of 16
    return _min_scaled(dl[:, :, None], codes, ml[:, :, None], out)


# Q3_K scale bytes -> planes: low nibble, high nibble, then the four 2-bit fields.
_Q3_SHIFTS = np.array([0, 4, 0, 2, 4, 6], dtype=np.uint8)
_Q3_MASKS = np.array([0x0F, 0x0F, 0x03, 0x03, 0x03, 0x03], dtype=np.uint8)


def _q3_k_scales(blocks: np.ndarray) -> np.ndarray:
    """Bytes 96..107 -> `[n, 16]` int8 scales (6-bit, already minus 32).

    Scale s: low 4 bits are the low nibble of byte s (s < 8) or the high nibble of byte
    s - 8; the top 2 bits are bits `2 (s // 4)` of byte `8 + s % 4`.
    """
    split = planes(byte_range(blocks, 96, 12), _Q3_SHIFTS, _Q3_MASKS)   # [6, n, 12]
    six = gather_runs(split, [(0, 0), (1, 0)], 8)              # [n, 16] low 4 bits
    # top bits: run k (4 bytes) is plane 2 + k at bytes 8..11 -> scale 4 k + i
    top = gather_runs(split, [(2, 8), (3, 8), (4, 8), (5, 8)], 4)
    top *= np.uint8(16)                                        # << 4
    six |= top
    signed = six.view(np.int8)
    signed -= np.int8(32)
    return signed


@register("dequantize", "Q3_K")
def dequantize_q3_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q3_K `[n, 110]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    dl = scaled(half_field(blocks, 108), _q3_k_scales(blocks), None, (n, 16))
    codes = crumb_codes(blocks, 32, 2).reshape(n, 8, 32)       # low 2 bits, 0..3
    # An hmask bit *clear* means "subtract 4": q = (low | bit << 2) - 4.
    high = bit_codes(blocks, 0)                                # [n, 8, 32] 0/1
    high *= np.uint8(4)                                        # << 2 (uint8 multiply is SIMD)
    codes |= high
    signed = codes.view(np.int8)
    signed -= np.int8(4)                                       # -> -4..3
    return scaled(dl[:, :, None], signed.reshape(n, 16, 16), out, (n, 256))


# Q4_K/Q5_K scale bytes -> planes: b & 63, b & 15, b >> 4, top 2 bits moved to 4..5, zero.
_K4_SHIFTS = np.array([0, 0, 4, 2, 0], dtype=np.uint8)
_K4_MASKS = np.array([0x3F, 0x0F, 0x0F, 0x30, 0x00], dtype=np.uint8)


def k4_scales_mins(blocks: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K bytes 4..15 -> `[n, 2, 8]` uint8: 6-bit scales `[:, 0]`, mins `[:, 1]`.

    With b = those 12 bytes: j < 4: scale = b[j] & 63, min = b[j + 4] & 63. j >= 4: the
    low 4 bits come from b[j + 4] (scale: low nibble, min: high nibble) and the top 2 bits
    from the spare top bits of b[j - 4] (scale) and b[j] (min).
    """
    n = blocks.shape[0]
    split = planes(byte_range(blocks, 4, 12), _K4_SHIFTS, _K4_MASKS)    # [5, n, 12]
    # [n, 16] = scale j<4 | scale j>=4 | min j<4 | min j>=4, low bits then top bits
    low = gather_runs(split, [(0, 0), (1, 8), (0, 4), (2, 8)], 4)
    top = gather_runs(split, [(4, 0), (3, 0), (4, 0), (3, 4)], 4)
    low |= top
    return low.reshape(n, 2, 8)


def _k4_scale_min(blocks: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Shared Q4_K/Q5_K header: `d * scale` and `dmin * min` per sub-block, `[n, 8, 1]` f32."""
    n = blocks.shape[0]
    # (d, dmin) are adjacent f16s at byte 0: [n, 2, 1] f32 times [n, 2, 8] codes
    d_dmin = field(blocks, 0, "<f2", 2).astype(np.float32)[:, :, None]
    both = scaled(d_dmin, k4_scales_mins(blocks), None, (n, 2, 8))
    return both[:, 0, :, None], both[:, 1, :, None]


@register("dequantize", "Q4_K")
def dequantize_q4_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q4_K `[n, 144]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    dl, ml = _k4_scale_min(blocks)
    codes = nibble_codes(blocks, 16, 4, 32).reshape(n, 8, 32)     # sub-block 2c + half
    return _min_scaled(dl, codes, ml, out)


@register("dequantize", "Q5_K")
def dequantize_q5_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q5_K `[n, 176]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    dl, ml = _k4_scale_min(blocks)
    codes = nibble_codes(blocks, 48, 4, 32).reshape(n, 8, 32)
    high = bit_codes(blocks, 16)                               # bit s -> sub-block s
    high *= np.uint8(16)                                       # << 4
    codes |= high
    return _min_scaled(dl, codes, ml, out)


@register("dequantize", "Q6_K")
def dequantize_q6_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q6_K `[n, 210]` uint8 -> `[n, 256]` float32.

    Half h (128 elements) uses ql[64 h : 64 h + 64] and qh[32 h : 32 h + 32]; its quarter k
    (32 elements) takes nibble `k // 2` of ql byte `64 h + 32 (k % 2) + l` and bits
    `2k..2k+1` of qh byte `32 h + l` as its top 2 bits.
    """
    n = blocks.shape[0]
    d = half_field(blocks, 208)                                # [n, 1] f32
    dl = scaled(d, blocks[:, 192:208].view(np.int8), None, (n, 16))  # [n, 16] d * sc
    nib = planes(byte_range(blocks, 0, 128), NIBBLE_SHIFTS, 0x0F)    # [2, n, 128]
    codes = np.empty((n, 2, 2, 2, 32), np.uint8)               # [n, h, k // 2, k % 2, l]
    # record [b, h, nibble, a] <- plane `nibble`, ql bytes 64 h + 32 a .. + 31 of block b
    records(codes, 32).reshape(n, 2, 2, 2)[...] = fields(
        nib, 0, (n, 2, 2, 2), (128, 64, n * 128, 32), 32)
    codes = codes.reshape(n, 2, 4, 32)
    high = crumb_codes(blocks, 128, 2)                         # [n, h, k, l] 0..3
    high *= np.uint8(16)                                       # << 4
    codes |= high
    signed = codes.view(np.int8)
    signed -= np.int8(32)                                      # -> -32..31
    # (d * sc) * q, as ggml's `d * sc[is] * q` evaluates left to right
    return scaled(dl[:, :, None], signed.reshape(n, 16, 16), out, (n, 256))


@register("dequantize", "Q8_K")
def dequantize_q8_k(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q8_K `[n, 292]` uint8 -> `[n, 256]` float32: x = d * q (d is float32)."""
    codes = blocks[:, 4:260].view(np.int8)                     # [n, 256] i8
    return scaled(float_field(blocks, 0), codes, out, codes.shape)


for _kernel in (dequantize_q2_k, dequantize_q3_k, dequantize_q4_k, dequantize_q5_k,
                dequantize_q6_k, dequantize_q8_k):
    _kernel.fills_out = True  # type: ignore[attr-defined]
