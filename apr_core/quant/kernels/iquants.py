"""Non-linear and ternary quants: IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4.

Block layouts (ggml-common.h; multi-byte fields little-endian):
  IQ4_NL  18 B: f16 d, u8 qs[16]                          x = d * kvalues[code]
  IQ4_XS 136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
                8 sub-blocks of 32: x = (d * (ls - 32)) * kvalues[code]
  TQ1_0   54 B: u8 qs[48], u8 qh[4], f16 d  (5 or 4 base-3 digits per byte)
  TQ2_0   66 B: u8 qs[64], f16 d            (2-bit codes, x = d * (q - 1))
  MXFP4   17 B: u8 e (E8M0 exponent), u8 qs[16]  x = e8m0_half(e) * kvalues_mxfp4[code]
  NVFP4   36 B: u8 s[4] (UE4M3 scales), u8 qs[32]: 4 sub-blocks of 16, sub-block k uses
                s[k] and qs[8 k : 8 k + 8]   x = ue4m3_half(s[k]) * kvalues_mxfp4[code]
Nibble order is the ggml one (low nibbles of a byte group first, then the high ones).

The grid-based IQ types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) are in
`iquants_grid`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..registry import register
from .floats import field, half_field
from .kquants import crumb_codes
from .legacy import fields, nibble_codes, records, scaled

# The 16 IQ4 code values (kvalues_iq4nl) and MXFP4's E2M1 values doubled, as float32
# tables: one gather per element gives the exact float32 the reference multiplies by d.
_IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                        1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12,
                          0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)

# np.take widens its indices to intp (8 bytes per element): smaller chunks keep that
# scratch array small enough to be reused rather than page-faulted in on every call.
TABLE_CHUNK_ELEMENTS = 1 << 16


def _table_scaled(scale: np.ndarray, codes: np.ndarray, table: np.ndarray,
                  out: Optional[np.ndarray], shape: tuple) -> np.ndarray:
    """`scale * table[codes]`: gather straight into `out`, then scale it in place."""
    if out is None:
        out = np.empty(shape, np.float32)
    view = out.reshape(codes.shape)
    np.take(table, codes, out=view)
    np.multiply(scale, view, out=view)                         # d * value, as ggml
    return out


@register("dequantize", "IQ4_NL")
def dequantize_iq4_nl(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ4_NL `[n, 18]` uint8 -> `[n, 32]` float32."""
    n = blocks.shape[0]
    codes = nibble_codes(blocks, 2, 1, 16).reshape(n, 32)      # [n, 32] 0..15
    return _table_scaled(half_field(blocks, 0), codes, _IQ4_VALUES, out, (n, 32))


@register("dequantize", "IQ4_XS")
def dequantize_iq4_xs(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ4_XS `[n, 136]` uint8 -> `[n, 256]` float32.

    Sub-block scale ib (6 bits): low 4 from nibble `ib % 2` of scales_l[ib // 2], top 2
    from bits `2 ib .. 2 ib + 1` of the u16 scales_h; used as `ls - 32`.
    """
    n = blocks.shape[0]
    six = np.empty((n, 4, 2), np.uint8)                        # [n, ib // 2, ib % 2]
    np.bitwise_and(blocks[:, 4:8], np.uint8(0x0F), out=six[:, :, 0])
    np.right_shift(blocks[:, 4:8], np.uint8(4), out=six[:, :, 1])
    six = six.reshape(n, 8)
    # [n, 1] u16 >> [8] -> [n, 8] top bits
    high = field(blocks, 2, "<u2")[:, None] >> np.arange(0, 16, 2, dtype=np.uint16)
    high &= np.uint16(3)
    high <<= np.uint16(4)
    six |= high.astype(np.uint8)
    signed = six.view(np.int8)
    signed -= np.int8(32)
    dl = scaled(half_field(blocks, 0), signed, None, (n, 8))   # [n, 8] f32 d * (ls - 32)
    codes = nibble_codes(blocks, 8, 8, 16).reshape(n, 8, 32)   # sub-block ib, 32 codes
    return _table_scaled(dl[:, :, None], codes, _IQ4_VALUES, out, (n, 256))


@register("dequantize", "TQ2_0")
def dequantize_tq2_0(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """TQ2_0 `[n, 66]` uint8 -> `[n, 256]` float32: x = d * (q - 1), q in 0..2."""
    n = blocks.shape[0]
    signed = crumb_codes(blocks, 0, 2).reshape(n, 256).view(np.int8)
    signed -= np.int8(1)
    return scaled(half_field(blocks, 64), signed, out, (n, 256))


@register("dequantize", "TQ1_0")
def dequantize_tq1_0(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """TQ1_0 `[n, 54]` uint8 -> `[n, 256]` float32.

    Each byte holds base-3 digits as a fixed-point fraction: digit k is
    `((byte * 3**k mod 256) * 3) >> 8`. Elements: 5 digits of qs[0:32] (160), 5 digits
    of qs[32:48] (80), 4 digits of qh[0:4] (16), digit-major within each part.
    """
    n, size = blocks.shape
    # [5, n, ts]: uint8 products wrap mod 256, exactly the C `uint8_t q = qs[m] * pow3[k]`
    shifted = blocks[None] * _POW3.reshape(-1, 1, 1)
    codes = np.empty((n, 256), np.uint8)
    step = n * size
    # Records are viewed on the whole (contiguous) codes array, then sliced: numpy 1.17
    # cannot re-view a column slice. Digits k of qs[0:32] -> records 2k, 2k + 1 (16 B).
    records(codes, 16)[:, 0:10].reshape(n, 5, 2)[...] = fields(
        shifted, 0, (n, 5, 2), (size, step, 16), 16)
    records(codes, 16)[:, 10:15] = fields(shifted, 32, (n, 5), (size, step), 16)
    records(codes, 4)[:, 60:64] = fields(shifted, 48, (n, 4), (size, step), 4)
    digits = codes.astype(np.uint16)
    digits *= np.uint16(3)
    digits >>= np.uint16(8)                                    # [n, 256] 0..2
    signed = digits.astype(np.int8)
    signed -= np.int8(1)
    return scaled(half_field(blocks, 52), signed, out, (n, 256))


def _e8m0_half(exponents: np.ndarray) -> np.ndarray:
    """E8M0 exponent byte -> float32 2**(e - 128) (ggml_e8m0_to_fp32_half), exact bits."""
    e = exponents.astype(np.uint32)
    small = np.uint32(0x00200000) << np.minimum(e, np.uint32(1))   # e = 0, 1: subnormals
    bits = np.where(e < 2, small, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


@register("dequantize", "MXFP4")
def dequantize_mxfp4(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """MXFP4 `[n, 17]` uint8 -> `[n, 32]` float32."""
    n = blocks.shape[0]
    d = _e8m0_half(blocks[:, 0])[:, None]                      # [n, 1] f32
    codes = nibble_codes(blocks, 1, 1, 16).reshape(n, 32)
    return _table_scaled(d, codes, _MXFP4_VALUES, out, (n, 32))


def _ue4m3_half_table() -> np.ndarray:
    """UE4M3 scale byte -> float32 value / 2 (ggml_ue4m3_to_fp32), all 256 bytes.

    4 exponent bits (bias 7) and 3 mantissa bits; bit 7 is not part of the value; 0x7F
    (the NaN code) decodes to 0. Every value is a short dyadic fraction, so computing in
    float64 and rounding to float32 is exact.
    """
    x = np.arange(256)
    exp, man = (x >> 3) & 15, (x & 7).astype(np.float64)
    value = np.where(exp == 0, man * 2.0 ** -9, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    value[[0, 0x7F]] = 0.0
    return (value * 0.5).astype(np.float32)


_UE4M3_HALF = _ue4m3_half_table()


@register("dequantize", "NVFP4")
def dequantize_nvfp4(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """NVFP4 `[n, 36]` uint8 -> `[n, 64]` float32."""
    n = blocks.shape[0]
    d = np.take(_UE4M3_HALF, blocks[:, 0:4])[:, :, None]             # [n, 4, 1] f32
    codes = nibble_codes(blocks, 4, 4, 8).reshape(n, 4, 16)    # sub-block k, 16 codes
    return _table_scaled(d, codes, _MXFP4_VALUES, out, (n, 64))


for _kernel in (dequantize_iq4_nl, dequantize_iq4_xs, dequantize_tq2_0, dequantize_tq1_0,
                dequantize_mxfp4, dequantize_nvfp4):
    _kernel.fills_out = True  # type: ignore[attr-defined]
for _kernel in (dequantize_iq4_nl, dequantize_iq4_xs, dequantize_mxfp4, dequantize_nvfp4):
    _kernel.chunk_elements = TABLE_CHUNK_ELEMENTS  # type: ignore[attr-defined]
