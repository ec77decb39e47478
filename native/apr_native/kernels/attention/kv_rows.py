"""KV cache rows in their stored types (numba): decode a row to float32 inside the
attention kernel, encode one on store (RoPE + store, `fused_layers.rope_rows`).

A cache is handed to jitted code as bytes `[n_kv, slots, row_bytes]` (uint8) plus a kind
code, so one compiled kernel serves every `--kv-type` (a branch per row). One position of
one KV head is one self-contained row: `head_dim` float32, float16, or `head_dim / 32`
ggml blocks (Q8_0: f16 d, 32 int8; Q4_0: f16 d, 16 bytes of nibbles). Encoding is
byte-identical to apr_core's quantizers (ggml's `quantize_row_*_ref`) for finite values;
decoding equals apr_core's dequantizers bit for bit (tests/native/test_attention_blocked.py).
Quantized rows hold Walsh-Hadamard-rotated values (apr_core.model.kv_types): `encode_row`
rotates before quantizing; `decode_row` gives the rows as stored, and the attention kernel
rotates its queries and output instead (`rotate_rows`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from apr_core.model import kv_types

from ..vector.lanes16 import (f16_bits, f16_row16_b, f32_row16_b, put_f32_b, put_u16_b,
                              q4_0_block_b, q8_0_block_b)

F32 = np.float32
# Kind codes inside jitted code, in apr_core.model.kv_types.NAMES order.
KV_F32, KV_F16, KV_Q8_0, KV_Q4_0 = (kv_types.NAMES.index(n) for n in ("f32", "f16", "q8_0",
                                                                      "q4_0"))
QK = 32
Q8_0_BYTES, Q4_0_BYTES = 34, 18
JUST_BELOW_HALF = F32(0.5) - F32(2.0 ** -25)      # C roundf as trunc(x + copysign(.., x))


def kind_code(cache: np.ndarray, head_dim: int) -> int:
    """The kind code of a cache array (apr_core.model.kv_types.kind_of)."""
    return kv_types.NAMES.index(kv_types.kind_of(cache, head_dim))


def as_bytes(cache: np.ndarray) -> np.ndarray:
    """A C-contiguous cache `[n_kv, slots, ...]` as its bytes `[n_kv, slots, row_bytes]`."""
    return cache.view(np.uint8).reshape(cache.shape[0], cache.shape[1], -1)


@njit(inline="always", cache=True)
def decode_row(kind, w, wo, hd, out, oo):
    """The stored row at byte `wo` of `w` -> float32 `out.flat[oo : oo + hd]`."""
    if kind == KV_F32:
        for c in range(0, hd, 16):
            f32_row16_b(w, wo + 4 * c, out, oo + c)
    elif kind == KV_F16:
        for c in range(0, hd, 16):
            f16_row16_b(w, wo + 2 * c, out, oo + c)
    elif kind == KV_Q8_0:
        for c in range(hd // QK):
            q8_0_block_b(w, wo + Q8_0_BYTES * c, out, oo + QK * c)
    else:
        for c in range(hd // QK):
            q4_0_block_b(w, wo + Q4_0_BYTES * c, out, oo + QK * c)


@njit(inline="always", cache=True)
def _c_int8(y):
    """C `(int8_t)(int)y` for a float32 of magnitude < 2**31: truncate, keep the low byte."""
    return np.int8(np.int32(y))              # numba's integer casts wrap (LLVM trunc)


@njit(cache=True)
def _q8_0_block(x, o, w, wo):
    """ggml quantize_row_q8_0_ref of `x[o:o+32]` into the 34 bytes at `w[wo]`."""
    amax = F32(0.0)
    for j in range(QK):
        a = abs(x[o + j])
        amax = amax if amax > a else a
    d = amax / F32(127.0)
    inv = F32(1.0) / d if d != F32(0.0) else F32(0.0)
    put_u16_b(w, wo, f16_bits(d))
    for j in range(QK):
        y = x[o + j] * inv
        r = y + JUST_BELOW_HALF if y >= F32(0.0) else y - JUST_BELOW_HALF
        w[wo + 2 + j] = np.uint8(np.int32(_c_int8(r)) & np.int32(255))


@njit(cache=True)
def _q4_0_block(x, o, w, wo):
    """ggml quantize_row_q4_0_ref of `x[o:o+32]` into the 18 bytes at `w[wo]`."""
    amax = F32(0.0)
    vmax = F32(0.0)
    for j in range(QK):
        a = abs(x[o + j])
        if amax < a:
            amax = a
            vmax = x[o + j]
    d = vmax / F32(-8.0)
    inv = F32(1.0) / d if d != F32(0.0) else F32(0.0)
    put_u16_b(w, wo, f16_bits(d))
    for j in range(QK // 2):
        lo = min(np.int32(_c_int8(x[o + j] * inv + F32(8.5))), np.int32(15))
        hi = min(np.int32(_c_int8(x[o + j + 16] * inv + F32(8.5))), np.int32(15))
        w[wo + 2 + j] = np.uint8((lo & np.int32(15)) | ((hi & np.int32(15)) << np.int32(4)))


@njit(inline="always", cache=True)
def rotate_run(x, o):
    """`x[o : o + 32]` times the Walsh-Hadamard matrix, in place: apr_core's
    `kv_types.rotate`, the same float32 operations in the same order."""
    h = 1
    while h < QK:
        for i in range(0, QK, 2 * h):
            for j in range(o + i, o + i + h):
                a, b = x[j], x[j + h]
                x[j], x[j + h] = a + b, a - b
        h *= 2


@njit(cache=True)
def rotate_rows(x, factor):
    """Every run of 32 of a contiguous float32 array rotated, then times `factor`."""
    flat = x.reshape(-1)
    for o in range(0, flat.shape[0], QK):
        rotate_run(flat, o)
        for j in range(o, o + QK):
            flat[j] *= factor


@njit(cache=True)
def encode_row(kind, x, w, wo):
    """float32 `x [hd]` stored as a row of `kind` at byte `wo` of `w` (quantized kinds:
    rotated first, as apr_core's `kv_types.encode`)."""
    hd = x.shape[0]
    if kind == KV_F32:
        for i in range(hd):
            put_f32_b(w, wo + 4 * i, x[i])
    elif kind == KV_F16:
        for i in range(hd):
            put_u16_b(w, wo + 2 * i, f16_bits(x[i]))
    else:
        y = x.copy()
        for c in range(hd // QK):
            rotate_run(y, QK * c)
            if kind == KV_Q8_0:
                _q8_0_block(y, QK * c, w, wo + Q8_0_BYTES * c)
            else:
                _q4_0_block(y, QK * c, w, wo + Q4_0_BYTES * c)


__all__ = ["KV_F32", "KV_F16", "KV_Q8_0", "KV_Q4_0", "kind_code", "as_bytes", "decode_row",
           "encode_row", "rotate_run", "rotate_rows"]
