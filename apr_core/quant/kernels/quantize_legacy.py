"""Quantizers for the 32-element block types Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1.

Each kernel is byte-identical to ggml's `quantize_row_*_ref` (what `ggml_quantize_chunk` runs
without an importance matrix): float32 arithmetic in the C operation order, `1.0f/d`
reciprocals, fp16 scales through `f32_to_f16_bits`, and C's float -> integer casts (truncation,
then the low byte for `(int8_t)`/`(uint8_t)`) reproduced by `c_int32`.

Kernel signature (registry): float32 [n_blocks, 32] -> uint8 [n_blocks, type_size].
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from ..registry import register
from .quantize_floats import (F32, as_blocks, c_int32, c_roundf, f32_to_f16_bits,
                              u16_bytes)

QK = 32


def signed_absmax(x: np.ndarray, axis: int) -> Tuple[np.ndarray, np.ndarray]:
    """The C loop `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` from amax = max = 0.

    Returns (amax, max): the first element of largest magnitude keeps its sign; NaNs are
    never picked (the comparison is false); a block with no positive |v| gives (0, +0.0).
    """
    a = np.abs(x)
    if a.size and np.isnan(a.max()):  # NaN never wins `amax < fabsf(v)`: rank it below 0
        a = np.where(np.isnan(a), F32(-1), a)
    idx = np.expand_dims(np.argmax(a, axis=axis), axis)  # argmax: first occurrence, like `<`
    amax = np.take_along_axis(a, idx, axis).squeeze(axis)
    vmax = np.take_along_axis(x, idx, axis).squeeze(axis)
    picked = amax > F32(0)
    return np.where(picked, amax, F32(0)), np.where(picked, vmax, F32(0))


def _min_max(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The C loop `if (v < min) min = v; if (v > max) max = v;` from min = FLT_MAX,
    max = -FLT_MAX over [n, 32] rows: NaNs skipped, results clamped to +-FLT_MAX, and a zero
    extremum takes the sign of the first zero in the row (the first equal value wins)."""
    big = F32(np.finfo(F32).max)
    if x.size and np.isnan(x.max()):
        lo = np.where(np.isnan(x), F32(np.inf), x).min(axis=1)
        hi = np.where(np.isnan(x), F32(-np.inf), x).max(axis=1)
    else:
        lo, hi = x.min(axis=1), x.max(axis=1)
    lo = np.minimum(lo, big)
    hi = np.maximum(hi, -big)
    zero_lo, zero_hi = lo == F32(0), hi == F32(0)
    if zero_lo.any() or zero_hi.any():
        first_zero = x[np.arange(x.shape[0]), np.argmax(x == F32(0), axis=1)]
        lo = np.where(zero_lo, first_zero, lo)
        hi = np.where(zero_hi, first_zero, hi)
    return lo, hi


def _recip(d: np.ndarray) -> np.ndarray:
    """`d ? 1.0f/d : 0.0f` (NaN is truthy in C, so it gives NaN)."""
    return np.where(d != F32(0), F32(1) / np.where(d != F32(0), d, F32(1)), F32(0))


def _nibbles(q: np.ndarray) -> np.ndarray:
    """uint8 [n, 32] quants -> uint8 [n, 16]: element j low nibble, element j+16 high."""
    return (q[:, :16] & np.uint8(0x0F)) | ((q[:, 16:] & np.uint8(0x0F)) << np.uint8(4))


def _fifth_bits(q: np.ndarray) -> np.ndarray:
    """uint8 [n, 32] 5-bit quants -> uint8 [n, 4]: bit 4 of element j at bit j of a LE u32."""
    bits = ((q >> np.uint8(4)) & np.uint8(1)).astype(np.uint32)
    qh = (bits << np.arange(QK, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    return np.ascontiguousarray(qh, dtype="<u4").reshape(-1, 1).view(np.uint8)


def _to_int8(v: np.ndarray) -> np.ndarray:
    """C `(int8_t)` of a float: truncate to int32, keep the low byte (two's complement)."""
    return c_int32(v).astype(np.int8).astype(np.int32)


@register("quantize", "Q8_0")
def quantize_q8_0(values: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> uint8 [n, 34]: fp16 d = amax/127, then int8 roundf(x/d)."""
    x = as_blocks(values, QK)
    with np.errstate(all="ignore"):
        a = np.abs(x)
        amax = a.max(axis=1)  # NaN-propagating: a row with a NaN needs the C walk below
        if np.isnan(amax).any():
            # C: amax = MAX(amax, fabsf(v)) = amax > |v| ? amax : |v|. A NaN |v| therefore
            # replaces amax, and the next element replaces the NaN: only elements after
            # the last NaN count, and a NaN in the last slot survives.
            is_nan = np.isnan(a)
            last_nan = np.where(is_nan.any(axis=1),
                                QK - 1 - np.argmax(is_nan[:, ::-1], axis=1), -1)
            after = np.arange(QK)[None, :] > last_nan[:, None]
            amax = np.where(after, a, F32(0)).max(axis=1)
            amax = np.where(last_nan == QK - 1, F32(np.nan), amax).astype(F32)
        d = amax / F32(127)
        inv = _recip(d)
        qs = c_int32(c_roundf(x * inv[:, None])).astype(np.int8).view(np.uint8)
    return np.concatenate([u16_bytes(f32_to_f16_bits(d)), qs], axis=1)


def _quantize_symmetric(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """Q4_0 / Q5_0 core: d = max / -nmax (signed max magnitude), q = MIN(2nmax-1,
    (int8_t)(x*id + nmax + 0.5)). Returns (fp16 bits of d [n], uint8 quants [n, 32])."""
    _, vmax = signed_absmax(x, axis=1)
    d = vmax / F32(-nmax)
    inv = _recip(d)
    q = _to_int8(x * inv[:, None] + F32(nmax + 0.5))
    q = np.minimum(q, 2 * nmax - 1).astype(np.uint8)  # stored into uint8_t: wraps like C
    return f32_to_f16_bits(d), q


def _quantize_affine(x: np.ndarray, levels: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_1 / Q5_1 core: d = (max - min) / levels, q = (x - min)*id + 0.5 truncated.
    Returns (fp16 d [n], fp16 min [n], int32 truncated quants [n, 32] before clamping)."""
    lo, hi = _min_max(x)
    d = (hi - lo) / F32(levels)
    inv = _recip(d)
    q = c_int32((x - lo[:, None]) * inv[:, None] + F32(0.5))
    return f32_to_f16_bits(d), f32_to_f16_bits(lo), q


@register("quantize", "Q4_0")
def quantize_q4_0(values: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> uint8 [n, 18]: fp16 d, 16 bytes of 4-bit quants."""
    x = as_blocks(values, QK)
    with np.errstate(all="ignore"):
        d, q = _quantize_symmetric(x, 8)
    return np.concatenate([u16_bytes(d), _nibbles(q)], axis=1)


@register("quantize", "Q5_0")
def quantize_q5_0(values: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> uint8 [n, 22]: fp16 d, u32 high bits, 16 bytes of low nibbles."""
    x = as_blocks(values, QK)
    with np.errstate(all="ignore"):
        d, q = _quantize_symmetric(x, 16)
    return np.concatenate([u16_bytes(d), _fifth_bits(q), _nibbles(q)], axis=1)


@register("quantize", "Q4_1")
def quantize_q4_1(values: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> uint8 [n, 20]: fp16 d, fp16 min, 16 bytes of 4-bit quants."""
    x = as_blocks(values, QK)
    with np.errstate(all="ignore"):
        d, m, q = _quantize_affine(x, 15)
    # C: MIN(15, (int8_t)v) stored into uint8_t.
    q = np.minimum(q.astype(np.int8).astype(np.int32), 15).astype(np.uint8)
    return np.concatenate([u16_bytes(d), u16_bytes(m), _nibbles(q)], axis=1)


@register("quantize", "Q5_1")
def quantize_q5_1(values: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> uint8 [n, 24]: fp16 d, fp16 min, u32 high bits, low nibbles."""
    x = as_blocks(values, QK)
    with np.errstate(all="ignore"):
        d, m, q = _quantize_affine(x, 31)
    q = q.astype(np.uint8)  # C: (uint8_t)v with no clamp, the low byte
    return np.concatenate([u16_bytes(d), u16_bytes(m), _fifth_bits(q), _nibbles(q)], axis=1)
