"""F16 / BF16 quantizers and the float32 helpers every ggml-exact quantizer shares.

Every function here reproduces, bit for bit, what ggml's C code does on x86-64 (SSE, no FMA):

* `f32_to_f16_bits`  = `ggml_compute_fp32_to_fp16` (round-to-nearest-even, NaN -> sign | 0x7E00)
* `f32_to_bf16_bits` = `ggml_compute_fp32_to_bf16` (round-to-nearest-even, NaN forced quiet)
* `nearest_int`      = ggml's `nearest_int` (the 12582912 magic-number rounding)
* `c_int32`          = a C `(int)` cast of a float as the x86 `cvttss2si` instruction does it
* `c_roundf`         = C `roundf` (halves away from zero)

numpy rule for exactness (numpy 1.17 value-based casting and numpy 2 NEP 50 must agree):
every constant that meets a float32 array is an `np.float32`, every integer constant that
meets a uint32 array is an `np.uint32`, and int arrays are cast to float32 explicitly before
they meet float32 arrays (int32 * float32 would promote to float64).
"""
from __future__ import annotations

import numpy as np

from ...errors import AprError, ErrorCode
from ..registry import register

F32 = np.float32
U32 = np.uint32

# 1.5 * 2**23: adding it leaves round(x) in the low mantissa bits (ggml `nearest_int`).
NEAREST_INT_MAGIC = F32(12582912.0)
_TWO31 = F32(2147483648.0)
_JUST_BELOW_HALF = F32(0.5) - F32(2.0 ** -25)  # 0.49999997f


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's `nearest_int`: round half to even via float32 `x + 1.5*2**23`, as int32.

    Reproduces C for every input, including the out-of-range ones C only asserts against
    (the result is then the same garbage the C bit trick yields).
    """
    bits = (np.asarray(x, dtype=F32) + NEAREST_INT_MAGIC).view(np.int32)
    return (bits & np.int32(0x007FFFFF)) - np.int32(0x00400000)


def c_int32(x: np.ndarray) -> np.ndarray:
    """C `(int)x` for float32 `x` as x86 `cvttss2si` does it: truncate toward zero, and
    0x80000000 for NaN and for anything outside the int32 range (C leaves those undefined;
    numpy's own cast of them differs between platforms, so they are pinned here)."""
    x = np.asarray(x, dtype=F32)
    if x.size == 0 or np.abs(x).max() < _TWO31:  # the usual case: plain truncation
        return x.astype(np.int32)
    ok = np.abs(x) < _TWO31  # False for NaN
    out = np.where(ok, x, F32(0)).astype(np.int32)
    out[~ok] = np.iinfo(np.int32).min
    return out


def c_roundf(x: np.ndarray) -> np.ndarray:
    """C `roundf`: nearest integer, halves away from zero (np.round rounds halves to even).

    trunc(x + copysign(0.5 - 2**-25, x)) in float32: the sum can only reach the next
    integer when x's fraction is at least 0.5 (checked against the float64 formula on
    every float32 in [2**-30, 2**40) and against libm's roundf around every half).
    """
    x = np.asarray(x, dtype=F32)
    return np.trunc(x + np.copysign(_JUST_BELOW_HALF, x))


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits (uint16) exactly as `ggml_compute_fp32_to_fp16`.

    ggml's bit trick rounds to nearest even, overflows to inf and keeps subnormals, which
    is what numpy's float16 cast does too (software in numpy 1.17, F16C/AVX-512 in 2.x);
    the two differ only on NaN, where ggml drops the payload: sign | 0x7E00. Checked
    against the C on all 2**32 float32 bit patterns.
    """
    x = np.asarray(x, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):
        half = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        sign = (x.view(U32) >> U32(16)).astype(np.uint16) & np.uint16(0x8000)
        half = np.where(nan, sign | np.uint16(0x7E00), half)
    return half


def f16_bits_to_f32(h: np.ndarray) -> np.ndarray:
    """IEEE half bits (uint16) -> float32; exact, like `GGML_FP16_TO_FP32`."""
    return np.asarray(h, dtype=np.uint16).view(np.float16).astype(F32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16) exactly as `ggml_compute_fp32_to_bf16`."""
    u = np.asarray(x, dtype=F32).view(U32)
    is_nan = (u & U32(0x7FFFFFFF)) > U32(0x7F800000)
    rounded = (u + (U32(0x7FFF) + ((u >> U32(16)) & U32(1)))) >> U32(16)
    quiet_nan = (u >> U32(16)) | U32(64)  # C forces the NaN quiet, keeps sign and payload top
    return np.where(is_nan, quiet_nan, rounded).astype(np.uint16)


def u16_bytes(h: np.ndarray) -> np.ndarray:
    """uint16 [n] -> little-endian bytes uint8 [n, 2] (how ggml_half fields are stored)."""
    return np.ascontiguousarray(h, dtype="<u2").reshape(-1, 1).view(np.uint8)


def as_blocks(values: np.ndarray, block_size: int) -> np.ndarray:
    """Validate and normalize a kernel input to C-contiguous float32 [n_blocks, block_size]."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[1] != block_size:
        raise AprError(ErrorCode.FORMAT, "quantize kernel expects [n_blocks, block_size] values",
                       shape=tuple(values.shape), block_size=block_size)
    return np.ascontiguousarray(values, dtype=F32)


@register("quantize", "F16")
def quantize_f16(values: np.ndarray) -> np.ndarray:
    """float32 [n, 1] -> uint8 [n, 2]: ggml's fp32 -> fp16 (round to nearest even)."""
    x = as_blocks(values, 1)
    return u16_bytes(f32_to_f16_bits(x.reshape(-1)))


@register("quantize", "BF16")
def quantize_bf16(values: np.ndarray) -> np.ndarray:
    """float32 [n, 1] -> uint8 [n, 2]: ggml's fp32 -> bf16 (round to nearest even, quiet NaN)."""
    x = as_blocks(values, 1)
    return u16_bytes(f32_to_bf16_bits(x.reshape(-1)))


@register("quantize", "F32")
def quantize_f32(values: np.ndarray) -> np.ndarray:
    """float32 [n, 1] -> uint8 [n, 4]: the identity, so re-typing a tensor to F32 (BF16 ->
    F32 with --precision f32) goes through the same registry as every other type."""
    x = as_blocks(values, 1)
    return np.ascontiguousarray(x.reshape(-1), dtype="<f4").view(np.uint8).reshape(-1, 4)
