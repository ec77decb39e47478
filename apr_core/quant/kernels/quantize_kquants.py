"""Quantizers for the 256-element super-block K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K.

Each kernel is byte-identical to ggml's `quantize_row_q*_K_ref` (what `ggml_quantize_chunk`
runs without an importance matrix): per sub-block scale searches (quantize_kquants_search),
the sub-block scales quantized against an fp16 super-block scale, then every element
re-quantized against the *stored* (fp16-rounded, integer-scaled) scale, as the C does.

Kernel signature (registry): float32 [n_blocks, 256] -> uint8 [n_blocks, type_size].
Inside, sub-blocks are laid out element-major, [sub_len, n_blocks * n_sub] (see the search
module for why).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..registry import register
from .quantize_floats import (F32, as_blocks, f16_bits_to_f32, f32_to_f16_bits, nearest_int,
                              u16_bytes)
from .quantize_kquants_search import (GROUP_MAX_EPS, make_q3_quants, make_qkx2_quants,
                                      make_qx_quants, seq_sum)
from .quantize_legacy import signed_absmax

QK_K = 256


def _subblocks(x: np.ndarray, sub_len: int) -> np.ndarray:
    """[N, 256] -> [sub_len, N * 256 / sub_len] (column = one sub-block, block-major)."""
    return np.ascontiguousarray(x.reshape(-1, sub_len).T)


def _unsub(L: np.ndarray, n_blocks: int) -> np.ndarray:
    """[sub_len, N * n_sub] -> [N, 256] (inverse of `_subblocks`)."""
    return np.ascontiguousarray(L.T).reshape(n_blocks, QK_K)


def _positive_max(v: np.ndarray) -> np.ndarray:
    """`m = 0; if (v > m) m = v;` over each row of [N, k]: NaNs skipped, +0.0 if none > 0."""
    m = np.fmax.reduce(v, axis=1)
    return np.where(m > F32(0), m, F32(0))


def _requantize(x: np.ndarray, L: np.ndarray, d: np.ndarray, dm: Optional[np.ndarray],
                lo: int, hi: int, offset: int = 0) -> np.ndarray:
    """The C second pass: where the stored scale d != 0,
    L = clamp(nearest_int((x + dm) / d), lo, hi) + offset.

    x: [N, n_sub, sub_len]; L: the search's quants, same shape (already offset);
    d, dm: [N, n_sub] (dm is None for the symmetric types). Sub-blocks with d == 0 keep the
    search's L (the C `continue`). Returns int32 [N, n_sub, sub_len].
    """
    num = x if dm is None else x + dm[:, :, None]
    q = np.clip(nearest_int(num / d[:, :, None]), lo, hi) + offset
    return np.where((d != F32(0))[:, :, None], q, L.astype(np.int32))


def _pack_2bit(L: np.ndarray) -> np.ndarray:
    """int [N, 256] in 0..3 -> uint8 [N, 64]: byte l of each 128-half holds elements
    l, l+32, l+64, l+96 at bits 0, 2, 4, 6."""
    q = L.reshape(-1, 2, 4, 32).astype(np.uint8)
    out = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return out.reshape(-1, 64)


def _pack_4bit(L: np.ndarray) -> np.ndarray:
    """int [N, 256] in 0..15 -> uint8 [N, 128]: byte l of each 64-chunk = element l (low)
    and element l+32 (high)."""
    q = L.reshape(-1, 4, 2, 32).astype(np.uint8)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)


def _bit_planes(bits: np.ndarray) -> np.ndarray:
    """uint8 [N, 8, 32] of 0/1 -> uint8 [N, 32]: byte m holds bits[:, k, m] at bit k."""
    out = bits[:, 0].copy()
    for k in range(1, 8):
        out |= bits[:, k] << np.uint8(k)
    return out


def _pack_scale_min_k4(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins [N, 8] -> the 12 `scales` bytes of Q4_K / Q5_K."""
    ls = ls.astype(np.uint8)
    lm = lm.astype(np.uint8)
    lo = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    mid = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    hi = (ls[:, 4:] & 0x0F) | ((lm[:, 4:] & 0x0F) << 4)
    return np.concatenate([lo, mid, hi], axis=1).astype(np.uint8)


def _scale_min_blocks(x: np.ndarray, nmax: int, rmin: float, nstep: int
                      ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shared Q4_K / Q5_K core over 8 sub-blocks of 32.

    Returns (fp16 d [N], fp16 dmin [N], scales bytes [N, 12], L int [N, 256] in 0..nmax).
    """
    n = x.shape[0]
    xs = _subblocks(x, 32)  # [32, N*8]
    av_x = np.sqrt(seq_sum(xs * xs) / F32(32))
    weights = av_x + np.abs(xs)
    scales, mins, L = make_qkx2_quants(xs, weights, nmax, rmin, 0.1, nstep, False)
    scales = scales.reshape(n, 8)
    mins = mins.reshape(n, 8)

    max_scale = _positive_max(scales)
    max_min = _positive_max(mins)
    inv_scale = np.where(max_scale > F32(0), F32(63) / max_scale, F32(0))
    inv_min = np.where(max_min > F32(0), F32(63) / max_min, F32(0))
    # C: uint8_t ls = nearest_int(...); ls = MIN(63, ls) -- truncate to a byte, then clamp.
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
    d16 = f32_to_f16_bits(max_scale / F32(63))
    dmin16 = f32_to_f16_bits(max_min / F32(63))

    d = f16_bits_to_f32(d16)[:, None] * ls.astype(F32)  # [N, 8]
    dm = f16_bits_to_f32(dmin16)[:, None] * lm.astype(F32)
    L = _requantize(x.reshape(n, 8, 32), _unsub(L, n).reshape(n, 8, 32), d, dm, 0, nmax)
    return d16, dmin16, _pack_scale_min_k4(ls, lm), L.reshape(n, QK_K)


@register("quantize", "Q4_K")
def quantize_q4_k(values: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> uint8 [n, 144]: d, dmin, 12 scale bytes, 128 bytes of nibbles."""
    x = as_blocks(values, QK_K)
    with np.errstate(all="ignore"):
        d16, dmin16, scales, L = _scale_min_blocks(x, 15, -1.0, 20)
    return np.concatenate([u16_bytes(d16), u16_bytes(dmin16), scales, _pack_4bit(L)], axis=1)


@register("quantize", "Q5_K")
def quantize_q5_k(values: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> uint8 [n, 176]: d, dmin, 12 scale bytes, 32 bytes of fifth bits,
    128 bytes of low nibbles."""
    x = as_blocks(values, QK_K)
    with np.errstate(all="ignore"):
        d16, dmin16, scales, L = _scale_min_blocks(x, 31, -0.5, 15)
    # qh byte j: bit 2c = fifth bit of element 64c+j, bit 2c+1 = of element 64c+32+j.
    qh = _bit_planes((L.reshape(-1, 8, 32) >> 4).astype(np.uint8))
    return np.concatenate([u16_bytes(d16), u16_bytes(dmin16), scales, qh,
                           _pack_4bit(L & 0x0F)], axis=1)


@register("quantize", "Q2_K")
def quantize_q2_k(values: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> uint8 [n, 84]: 16 scale/min bytes, 64 bytes of 2-bit quants,
    d, dmin."""
    x = as_blocks(values, QK_K)
    n = x.shape[0]
    with np.errstate(all="ignore"):
        xs = _subblocks(x, 16)  # [16, N*16]
        scales, mins, L = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
        scales = scales.reshape(n, 16)
        mins = mins.reshape(n, 16)
        max_scale = _positive_max(scales)
        max_min = _positive_max(mins)
        q4scale = F32(15)
        has_s = (max_scale > F32(0))[:, None]
        has_m = (max_min > F32(0))[:, None]
        ls = np.where(has_s, nearest_int((q4scale / max_scale)[:, None] * scales), 0)
        lm = np.where(has_m, nearest_int((q4scale / max_min)[:, None] * mins), 0)
        # C: scales[j] = l (uint8_t), then scales[j] |= (l << 4): bytes wrap.
        sc = ((ls | (lm << 4)) & 0xFF).astype(np.uint8)
        d16 = f32_to_f16_bits(np.where(has_s[:, 0], max_scale / q4scale, F32(0)))
        dmin16 = f32_to_f16_bits(np.where(has_m[:, 0], max_min / q4scale, F32(0)))
        d = f16_bits_to_f32(d16)[:, None] * (sc & 0x0F).astype(F32)
        dm = f16_bits_to_f32(dmin16)[:, None] * (sc >> 4).astype(F32)
        L = _requantize(x.reshape(n, 16, 16), _unsub(L, n).reshape(n, 16, 16), d, dm, 0, 3)
    return np.concatenate([sc, _pack_2bit(L.reshape(n, QK_K)), u16_bytes(d16),
                           u16_bytes(dmin16)], axis=1)


@register("quantize", "Q3_K")
def quantize_q3_k(values: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> uint8 [n, 110]: 32 bytes hmask, 64 bytes of 2-bit quants,
    12 bytes of 6-bit signed scales, d."""
    x = as_blocks(values, QK_K)
    n = x.shape[0]
    with np.errstate(all="ignore"):
        scales, L = make_q3_quants(_subblocks(x, 16), 4)
        scales = scales.reshape(n, 16)
        _, max_scale = signed_absmax(scales, axis=1)
        has = (max_scale != F32(0))[:, None]
        iscale = F32(-32) / max_scale
        # C: int8_t l = nearest_int(...); l = MAX(-32, MIN(31, l)) + 32.
        l8 = nearest_int(iscale[:, None] * scales).astype(np.int8).astype(np.int32)
        l6 = np.where(has, np.clip(l8, -32, 31) + 32, 0)  # memset(0) when max_scale == 0
        lo = (l6[:, :8] & 0x0F) | ((l6[:, 8:] & 0x0F) << 4)
        top = l6 >> 4  # [N, 16] in 0..3; scales[8 + j%4] gets bits 2*(j/4)
        hi = top[:, 0:4] | (top[:, 4:8] << 2) | (top[:, 8:12] << 4) | (top[:, 12:16] << 6)
        sc_bytes = np.concatenate([lo, hi], axis=1).astype(np.uint8)
        d16 = f32_to_f16_bits(np.where(has[:, 0], F32(1) / iscale, F32(0)))
        d = f16_bits_to_f32(d16)[:, None] * (l6 - 32).astype(F32)
        L = _requantize(x.reshape(n, 16, 16), _unsub(L, n).reshape(n, 16, 16), d, None,
                        -4, 3, offset=4)
    L = L.reshape(n, QK_K)
    # hmask byte m, bit k = high bit of element 32k + m; the low two bits go to qs.
    hmask = _bit_planes((L > 3).reshape(n, 8, 32).astype(np.uint8))
    low = np.where(L > 3, L - 4, L)
    return np.concatenate([hmask, _pack_2bit(low), sc_bytes, u16_bytes(d16)], axis=1)


@register("quantize", "Q6_K")
def quantize_q6_k(values: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> uint8 [n, 210]: 128 bytes low nibbles, 64 bytes high 2-bit
    pairs, 16 int8 scales, d."""
    x = as_blocks(values, QK_K)
    n = x.shape[0]
    with np.errstate(all="ignore"):
        scales, L = make_qx_quants(_subblocks(x, 16), 32)
        scales = scales.reshape(n, 16)
        max_abs, max_scale = signed_absmax(scales, axis=1)
        zero = max_abs < GROUP_MAX_EPS  # C zeroes the whole block
        iscale = F32(-128) / max_scale
        d16 = f32_to_f16_bits(F32(1) / iscale)
        # C: int8_t scales[ib] = MIN(127, nearest_int(...)).
        sc = np.minimum(nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
        d = f16_bits_to_f32(d16)[:, None] * sc.astype(F32)
        L = _requantize(x.reshape(n, 16, 16), _unsub(L, n).reshape(n, 16, 16), d, None,
                        -32, 31, offset=32)
    q = L.reshape(n, 2, 4, 32).astype(np.uint8)  # [N, half, quarter, l]
    ql = np.concatenate([q[:, :, 0] & 0x0F | ((q[:, :, 2] & 0x0F) << 4),
                         q[:, :, 1] & 0x0F | ((q[:, :, 3] & 0x0F) << 4)], axis=2)
    hb = q >> 4
    qh = hb[:, :, 0] | (hb[:, :, 1] << 2) | (hb[:, :, 2] << 4) | (hb[:, :, 3] << 6)
    out = np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8),
                          u16_bytes(d16)], axis=1)
    out[zero] = 0
    return out


# The searches make a few thousand numpy calls per kernel call whatever its size, so the
# public API (which honours `chunk_elements`) should hand them more than its default chunk:
# 2**18 elements (1024 blocks, 1 MiB of float32) measured fastest, large enough to amortize
# the calls and small enough that the [32, 8192] scratch arrays stay near the cache.
for _kernel in (quantize_q2_k, quantize_q3_k, quantize_q4_k, quantize_q5_k, quantize_q6_k):
    _kernel.chunk_elements = 1 << 18  # type: ignore[attr-defined]
