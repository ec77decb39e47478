"""Plain element types -> float32, and the scale-field readers the block kernels share.

Every row of the dtype table that names a numpy dtype (F32, F64, the integers, U8, BOOL)
gets the same table-driven kernel: a zero-copy view of the bytes in that dtype, then one
`astype(float32)` (a no-op for F32). F16 then gets a faster table kernel in its place;
BF16, F8_E4M3 and F8_E5M2 have no numpy dtype and get their own bit-level kernels.

Plain types are "blocks" of one element: a kernel gets `[n, type_size]` uint8 and returns
`[n, 1]` float32. The cast kernels allocate nothing but their result, so `whole_tensor =
True` tells the API to call them once on the whole tensor (for F32 that keeps the result a
zero-copy view); the table kernels (F16, F8_E4M3) run chunked like the block quants.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from ...dtypes import ALL, DType
from ..registry import register

Kernel = Callable[[np.ndarray], np.ndarray]


# ---------------------------------------------------------------------------------------
# Scale fields inside quant blocks (used by legacy, kquants, iquants)
# ---------------------------------------------------------------------------------------

def field(blocks: np.ndarray, offset: int, dtype: str, count: int = 0) -> np.ndarray:
    """The `dtype` field at byte `offset` of every block, as a strided view: `[n]`, or
    `[n, count]` for `count` adjacent values.

    `blocks` is a `[n_blocks, type_size]` uint8 array (made C-contiguous if it is not).
    Why not `blocks[:, a:b].view(...)`: numpy 1.17 only re-views C-contiguous arrays, and
    copying the column first would cost a pass; a strided `np.ndarray` reads in place.
    """
    if not blocks.flags.c_contiguous:
        blocks = np.ascontiguousarray(blocks)
    n, size = blocks.shape
    if count:
        # [n_blocks, type_size] u8 -> [n_blocks, count] `dtype`
        itemsize = np.dtype(dtype).itemsize
        return np.ndarray((n, count), dtype, blocks, offset, (size, itemsize))
    # [n_blocks, type_size] u8 -> [n_blocks] `dtype` (strided, no copy)
    return np.ndarray((n,), dtype, blocks, offset, (size,))


def half_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian f16 field at `offset` of each block, widened to float32 `[n, 1]`.

    f16 -> f32 is exact, so later products round once in float32 exactly like ggml's
    `GGML_FP16_TO_FP32(x.d) * q` (and gguf-py's `d.astype(np.float32) * q`).
    """
    # [n_blocks] f16 -> [n_blocks, 1] f32
    return field(blocks, offset, "<f2").astype(np.float32)[:, None]


def float_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian f32 field at `offset` of each block as float32 `[n, 1]`."""
    return field(blocks, offset, "<f4").astype(np.float32)[:, None]


# ---------------------------------------------------------------------------------------
# Element types
# ---------------------------------------------------------------------------------------

def _numpy_kernel(row: DType) -> Kernel:
    """Kernel for a type numpy knows: view the bytes, widen/narrow to float32 once."""
    numpy_dtype = np.dtype(row.numpy)

    def dequantize_plain(blocks: np.ndarray) -> np.ndarray:
        # [n, itemsize] u8 -> [n, 1] <dtype> (view) -> [n, 1] f32; a view for little-endian F32
        return blocks.view(numpy_dtype).astype(np.float32, copy=False)

    dequantize_plain.__name__ = "dequantize_" + row.name.lower()
    dequantize_plain.whole_tensor = True  # type: ignore[attr-defined]
    return dequantize_plain


# Every numpy-typed row of the table; F16's entry is then replaced by the table kernel below.
for _row in ALL:
    if _row.numpy is not None:
        register("dequantize", _row.name)(_numpy_kernel(_row))


_F16_TABLE: List[np.ndarray] = []


@register("dequantize", "F16")
def dequantize_f16(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """F16 via a 65536-entry float32 table (256 KiB, built on first use).

    The table is numpy's own exact f16 -> f32 conversion of every bit pattern (NaN
    payloads included), so results equal `astype(float32)` bit for bit; one cached
    gather beats numpy's element-wise half conversion (measured ~1.3x on numpy 2,
    ~3x on numpy 1.17, which has no vectorized half casts).
    """
    if not _F16_TABLE:
        codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        _F16_TABLE.append(codes.view(np.float16).astype(np.float32))
    # [n, 2] u8 -> [n, 1] u16 -> [n, 1] f32
    return np.take(_F16_TABLE[0], blocks.view("<u2"), out=out)


# Chunked: np.take widens its indices to intp, a scratch array we keep small.
dequantize_f16.fills_out = True  # type: ignore[attr-defined]
dequantize_f16.chunk_elements = 1 << 16  # type: ignore[attr-defined]


@register("dequantize", "BF16")
def dequantize_bf16(blocks: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: widen the bits, shift them up 16."""
    # [n, 2] u8 -> [n, 1] u16 -> [n, 1] u32 -> [n, 1] f32 (same bits as ggml_bf16_to_fp32)
    wide = blocks.view("<u2").astype(np.uint32)
    wide <<= np.uint32(16)
    return wide.view(np.float32)


dequantize_bf16.whole_tensor = True  # type: ignore[attr-defined]


def _e5m2_table() -> np.ndarray:
    """All 256 E5M2 values: E5M2 is the top byte of an IEEE f16 (same bias, inf and NaN)."""
    codes = np.arange(256, dtype=np.uint16) << np.uint16(8)
    return codes.view(np.float16).astype(np.float32)


def _e4m3fn_table() -> np.ndarray:
    """All 256 E4M3FN values (OCP FP8: bias 7, no infinities, NaN = S.1111.111).

    Shifting the 7 magnitude bits into an f16 (bias 15) gives the value / 2**8 for normal
    and subnormal codes alike, so one exact multiply by 256 finishes the job.
    """
    codes = np.arange(256, dtype=np.uint16)
    bits = ((codes & 0x80) << 8) | ((codes & 0x7F) << 7)
    table = bits.view(np.float16).astype(np.float32) * np.float32(256.0)
    magnitude_nan = (codes & 0x7F) == 0x7F
    table[magnitude_nan] = np.where(codes[magnitude_nan] & 0x80, -np.nan, np.nan)
    return table


def _byte_table_kernel(name: str, table: np.ndarray) -> Kernel:
    """One-byte float types: one gather per element from a 256-entry float32 table."""
    def dequantize_byte_float(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        # [n, 1] u8 -> [n, 1] f32
        return np.take(table, blocks, out=out)

    dequantize_byte_float.__name__ = "dequantize_" + name.lower()
    dequantize_byte_float.fills_out = True  # type: ignore[attr-defined]
    dequantize_byte_float.chunk_elements = 1 << 16  # type: ignore[attr-defined]
    return register("dequantize", name)(dequantize_byte_float)


dequantize_f8_e5m2 = _byte_table_kernel("F8_E5M2", _e5m2_table())
dequantize_f8_e4m3 = _byte_table_kernel("F8_E4M3", _e4m3fn_table())
