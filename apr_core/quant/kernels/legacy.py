"""Legacy 32-element block quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and the unpacking
helpers every block kernel shares.

Block layouts (ggml-common.h; every multi-byte field little-endian):
  Q4_0  18 B: f16 d, u8 qs[16]            x = d * (q - 8)
  Q4_1  20 B: f16 d, f16 m, u8 qs[16]     x = d * q + m
  Q5_0  22 B: f16 d, u32 qh, u8 qs[16]    x = d * (q - 16)
  Q5_1  24 B: f16 d, f16 m, u32 qh, qs    x = d * q + m
  Q8_0  34 B: f16 d, i8 qs[32]            x = q * d
  Q8_1  (see `dequantize_q8_1`)           x = q * d
4-bit codes: byte j holds element j in its low nibble and element j + 16 in its high one.
Q5 adds bit i of `qh` as bit 4 of element i.

Bit-exactness with ggml / gguf-py: the integer code is formed exactly (uint8/int8 ops),
then one float32 multiply by the f16 scale widened to f32 (and, for Q4_1/Q5_1, one float32
add of the min), the reference's operations in its order. No float64/float16 arithmetic.

Speed, and why the helpers look the way they do: a numpy call on a 2-D array whose rows
are short and not contiguous pays ~10-30 ns of iterator overhead *per row*, which for
16-byte rows costs more than the arithmetic. So the packed bytes are first copied out
contiguously (`byte_range`), bit work runs on them in long loops (`planes`: one
shifted/masked copy per bit position), and the bytes each output position needs are then
moved by one strided copy of wide fixed-size records (`fields`: numpy "V<k>" void
elements of 4-32 bytes), so a block costs a few record copies instead of dozens of tiny
loops. Left shifts of uint8 are written as multiplies: numpy vectorizes uint8 multiply
but not uint8 left shift. Float32 results are written straight into the caller's `out`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from ..registry import register
from .floats import float_field, half_field

NIBBLE_SHIFTS = np.array([0, 4], dtype=np.uint8)


def planes(region: np.ndarray, shifts: np.ndarray, mask: Union[int, np.ndarray]) -> np.ndarray:
    """`[n, k]` uint8 -> `[len(shifts), n, k]`: plane p is `(region >> shifts[p]) & mask[p]`.

    `mask` is one int for every plane or a uint8 array with one per plane. Plane-major so
    that both numpy calls run one long contiguous loop per plane.
    """
    # [1, n, k] >> [p, 1, 1] -> [p, n, k]
    out = region[None] >> shifts.reshape(-1, 1, 1)
    out &= mask.reshape(-1, 1, 1) if isinstance(mask, np.ndarray) else np.uint8(mask)
    return out


def fields(source: np.ndarray, offset: int, shape: Sequence[int], strides: Sequence[int],
           width: int) -> np.ndarray:
    """A view of `width`-byte records of C-contiguous uint8 `source` as "V<width>" elements.

    `offset`, `strides` are in bytes. Assigning it into a `.view("V<width>")` of a
    destination moves each record with one element copy, however the bytes are laid out.
    """
    return np.ndarray(tuple(shape), "V{}".format(width), source, offset, tuple(strides))


def records(array: np.ndarray, width: int) -> np.ndarray:
    """`array` (C-contiguous uint8 `[n, k]`) viewed as `[n, k // width]` "V<width>" records."""
    return array.reshape(array.shape[0], -1).view("V{}".format(width))


def byte_range(blocks: np.ndarray, offset: int, width: int) -> np.ndarray:
    """Bytes `offset .. offset + width - 1` of every block as a contiguous `[n, width]` copy.

    One record copy; afterwards the bit work touches only those bytes, in long loops.
    """
    n, size = blocks.shape
    if offset == 0 and width == size and blocks.flags.c_contiguous:
        return blocks
    if not blocks.flags.c_contiguous:
        blocks = np.ascontiguousarray(blocks)
    region = np.empty((n, width), np.uint8)
    records(region, width)[:, 0] = fields(blocks, offset, (n,), (size,), width)
    return region


def gather_runs(split: np.ndarray, runs: Sequence[Tuple[int, int]], width: int) -> np.ndarray:
    """Planes `[p, n, k]` -> `[n, len(runs) * width]`: run i is `width` bytes of each
    block's row in plane `runs[i][0]`, starting at byte `runs[i][1]`.

    One 1-D record copy per run (a fixed handful per dtype, never per block).
    """
    _, n, size = split.shape
    out = np.empty((n, len(runs) * width), np.uint8)
    dest = records(out, width)
    for i, (plane, offset) in enumerate(runs):
        dest[:, i] = fields(split, plane * n * size + offset, (n,), (size,), width)
    return out


def unpack(blocks: np.ndarray, offset: int, groups: int, width: int, shifts: np.ndarray,
           mask: int) -> np.ndarray:
    """Bit fields of `groups` runs of `width` bytes at `offset` -> `[n, groups, p, width]`.

    `[:, g, p, l]` is `(byte[offset + width g + l] >> shifts[p]) & mask`: every ggml
    packing puts a run's lowest fields first, then the next ones up, in this order.
    """
    n = blocks.shape[0]
    size = groups * width
    split = planes(byte_range(blocks, offset, size), shifts, mask)   # [p, n, size]
    codes = np.empty((n, groups, len(shifts), width), np.uint8)
    # record [b, g, p] <- plane p, bytes width g .. width g + width - 1 of block b
    records(codes, width).reshape(n, groups, len(shifts))[...] = fields(
        split, 0, (n, groups, len(shifts)), (size, width, n * size), width)
    return codes


def nibble_codes(blocks: np.ndarray, offset: int, groups: int, width: int) -> np.ndarray:
    """`groups` runs of `width` packed bytes at `offset` -> `[n, groups, 2, width]` codes.

    `[:, g, 0, l]` is the low nibble of byte `offset + width * g + l`, `[:, g, 1, l]` its
    high nibble: ggml's order (a run's low nibbles, then its high nibbles).
    """
    return unpack(blocks, offset, groups, width, NIBBLE_SHIFTS, 0x0F)


def scaled(scale: np.ndarray, codes: np.ndarray, out: Optional[np.ndarray],
           shape: Sequence[int]) -> np.ndarray:
    """`scale * float32(codes)` into `out` (allocated when None), returned shaped `shape`.

    `codes` are integers (exact in float32) and `scale` is float32 broadcastable against
    them (one value per group). Mixed int/float operands make numpy run a buffered loop
    that converts and multiplies chunk by chunk: one rounding, no float32 temporary.
    """
    if out is None:
        out = np.empty(tuple(shape), np.float32)
    np.multiply(scale, codes, out=out.reshape(codes.shape))
    return out


def _five_bit_codes(blocks: np.ndarray, qh_offset: int) -> np.ndarray:
    """Q5 codes `[n, 32]` uint8 in 0..31: nibble | (bit i of the u32 `qh`) << 4."""
    codes = nibble_codes(blocks, qh_offset + 4, 1, 16).reshape(-1, 32)
    # qh is little-endian, so bit i of the u32 is bit i % 8 of byte i // 8: exactly
    # unpackbits' little bit order over the 4 bytes -> [n, 32] of 0/1.
    high = np.unpackbits(blocks[:, qh_offset:qh_offset + 4], axis=1, bitorder="little")
    high *= np.uint8(16)                                       # << 4
    codes |= high
    return codes


@register("dequantize", "Q4_0")
def dequantize_q4_0(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q4_0 `[n, 18]` uint8 -> `[n, 32]` float32."""
    signed = nibble_codes(blocks, 2, 1, 16).reshape(-1, 32).view(np.int8)  # [n, 32] 0..15
    signed -= np.int8(8)                                       # -> -8..7
    return scaled(half_field(blocks, 0), signed, out, signed.shape)


@register("dequantize", "Q4_1")
def dequantize_q4_1(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q4_1 `[n, 20]` uint8 -> `[n, 32]` float32."""
    codes = nibble_codes(blocks, 4, 1, 16).reshape(-1, 32)     # [n, 32] 0..15
    out = scaled(half_field(blocks, 0), codes, out, codes.shape)  # d * q
    np.add(out, half_field(blocks, 2), out=out)                # ... + m, rounded separately
    return out


@register("dequantize", "Q5_0")
def dequantize_q5_0(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q5_0 `[n, 22]` uint8 -> `[n, 32]` float32."""
    signed = _five_bit_codes(blocks, 2).view(np.int8)          # [n, 32] 0..31
    signed -= np.int8(16)                                      # -> -16..15
    return scaled(half_field(blocks, 0), signed, out, signed.shape)


@register("dequantize", "Q5_1")
def dequantize_q5_1(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q5_1 `[n, 24]` uint8 -> `[n, 32]` float32."""
    codes = _five_bit_codes(blocks, 4)                         # [n, 32] 0..31
    out = scaled(half_field(blocks, 0), codes, out, codes.shape)
    np.add(out, half_field(blocks, 2), out=out)
    return out


@register("dequantize", "Q8_0")
def dequantize_q8_0(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q8_0 `[n, 34]` uint8 -> `[n, 32]` float32."""
    codes = blocks[:, 2:34].view(np.int8)                      # [n, 32] i8 (strided view)
    return scaled(half_field(blocks, 0), codes, out, codes.shape)


@register("dequantize", "Q8_1")
def dequantize_q8_1(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Q8_1 -> `[n, 32]` float32: x = q * d (the sum field `s` is not needed).

    Two layouts exist and the block width tells them apart: ggml today stores f16 `d` and
    `s` (36 bytes); the older layout that gguf-py's size table still lists stores f32
    `d` and `s` (40 bytes). Either way `d` comes first and the 32 int8 codes come last.
    """
    size = blocks.shape[1]
    d = float_field(blocks, 0) if size == 40 else half_field(blocks, 0)   # [n, 1] f32
    codes = blocks[:, size - 32:].view(np.int8)                # [n, 32] i8
    return scaled(d, codes, out, codes.shape)


for _kernel in (dequantize_q4_0, dequantize_q4_1, dequantize_q5_0, dequantize_q5_1,
                dequantize_q8_0, dequantize_q8_1):
    _kernel.fills_out = True  # type: ignore[attr-defined]
