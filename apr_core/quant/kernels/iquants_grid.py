"""Grid-based i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.

Block layouts (ggml-common.h, QK_K = 256; multi-byte fields little-endian). Each element
group of 8 (IQ2, IQ1) or 4 (IQ3) values is one row of a codebook ("grid"), picked by an
index, with per-element sign bits and one scale per run of 16 or 32 elements:
  IQ2_XXS  66 B: f16 d, then per 32 elements 8 bytes: u8 grid[4], u32 aux
                 aux bits 7l..7l+6: ksigns index of group l; bits 28..31: scale ls
                 x = d * (0.5 + ls) * 0.25 * iq2xxs_grid[g][j] * sign
  IQ2_XS   74 B: f16 d, u16 qs[32] (9-bit grid index | 7-bit ksigns index << 9),
                 u8 scales[8] (low nibble: elements 0..15 of the 32, high: 16..31)
  IQ2_S    82 B: f16 d, u8 qs[32] (grid index low 8 bits), u8 signs[32] (one byte per
                 group), u8 qh[8] (bits 2l..2l+1 of qh[ib]: index bits 8..9 of group
                 4 ib + l), u8 scales[8] (as IQ2_XS)
  IQ3_XXS  98 B: f16 d, u8 qs[64] (grid indices, 4 elements each), u32 aux[8] (as
                 IQ2_XXS: four 7-bit ksigns indices per 32 elements, ls in bits 28..31)
                 x = d * (0.5 + ls) * 0.5 * iq3xxs_grid[g][j] * sign
  IQ3_S   110 B: f16 d, u8 qs[64], u8 qh[8] (bit k % 8 of qh[k // 8]: index bit 8 of
                 qs[k]), u8 signs[32] (one byte per 8 elements), u8 scales[4]
                 x = d * (1 + 2 sc) * iq3s_grid[g][j] * sign, sc a nibble per 32 elements
  IQ1_S    50 B: f16 d, u8 qs[32], u16 qh[8]: per 32 elements, bits 3l..3l+2 are index
                 bits 8..10 of group l, bits 12..14 the scale s, bit 15 the delta sign
                 x = d * (2 s + 1) * (iq1s_grid[g][j] + delta), delta = +-0.125
  IQ1_M    56 B: u8 qs[32], u8 qh[16] (nibble g % 2 of qh[g // 2]: index bits 8..10 of
                 group g in bits 0..2, delta sign in bit 3), u16 sc[4] (3-bit scale s
                 of 16 elements k at bits 3 (k % 4) of sc[k // 4]; the f16 d is the top
                 nibbles of sc[0..3], least significant first)
The sign of element j of a group is bit j of its sign byte; ksigns maps a 7-bit index to
a byte whose 8th bit makes the count of set bits even.

Exactness: ggml computes `(scale * grid[j]) * (+-1)` in float32; negation is exact, so
`scale * (+-grid[j])` has the same bits. The kernels build that signed integer code in
int8 and multiply once by the float32 scale, computed in ggml's order. IQ1's
`dl * (grid + delta)` equals `(dl * 0.125) * (8 grid +- 1)` bit for bit (scaling by a
power of two is exact: dl >= 2**-24 and grid + delta != 0), so IQ1 also becomes an integer
code times one scale.

Speed: each (grid row, sign pattern) pair is pre-multiplied into one lazily built table
of signed int8 rows, viewed as uint64 (8 values) or uint32 (4 values), so a group is
one `np.take` of one word instead of a grid gather, a sign gather and a multiply (the
largest table, IQ2_S's 1024 rows x 256 sign bytes, is 2 MiB). Packed bit fields are
unpacked by `_spread` in whole-word operations, never in short per-element inner loops.

The codebooks (iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid, iq3s_grid, iq1s_grid,
ksigns_iq2xs) are format data from ggml (ggml-common.h, MIT license, (c) the ggml
authors). They live in `apr_core/data/iq_grids.bin`, written by `scripts/gen_iq_grids.py`
from the installed gguf-py package (llama.cpp's Python port, the oracle):
    python scripts/gen_iq_grids.py            # regenerate
    python scripts/gen_iq_grids.py --check    # exit 1 if the packaged file is stale
File layout: the tables of `GRID_TABLES`, in that order, with no header or padding; table
`(name, rows, width)` is `rows * width` bytes, row-major, one byte per grid value exactly
as ggml stores it (iq1s_grid's -1/0/1 as int8 two's complement).
"""
from __future__ import annotations

import pkgutil
from typing import Dict, Optional

import numpy as np

from ...errors import AprError, ErrorCode
from ..registry import register
from .floats import field, half_field
from .kquants import BIT_SHIFTS
from .legacy import fields, records, scaled

# (name, rows, values per row): the order and sizes of the tables in iq_grids.bin.
GRID_TABLES = (
    ("ksigns", 128, 1),
    ("iq2xxs", 256, 8),
    ("iq2xs", 512, 8),
    ("iq2s", 1024, 8),
    ("iq3xxs", 256, 4),
    ("iq3s", 512, 4),
    ("iq1s", 2048, 8),
)
GRID_FILE = "data/iq_grids.bin"


_grids: Dict[str, np.ndarray] = {}
_tables: Dict[str, np.ndarray] = {}


def grids() -> Dict[str, np.ndarray]:
    """{name: `[rows, width]` uint8} of every codebook, read once from the package data."""
    if not _grids:
        try:
            data = pkgutil.get_data("apr_core", GRID_FILE)
        except OSError:
            data = None
        expected = sum(rows * width for _, rows, width in GRID_TABLES)
        if data is None or len(data) != expected:
            raise AprError(ErrorCode.IO, "i-quant grid tables are missing or damaged",
                           path="apr_core/" + GRID_FILE, expected=expected,
                           got=None if data is None else len(data))
        flat = np.frombuffer(data, np.uint8)
        tables, offset = {}, 0
        for name, rows, width in GRID_TABLES:
            tables[name] = flat[offset:offset + rows * width].reshape(rows, width)
            offset += rows * width
        _grids.update(tables)  # all at once: a concurrent first caller sees none or all
    return _grids


def _signed_rows(grid: np.ndarray, patterns: np.ndarray) -> np.ndarray:
    """`[G, w]` int8 grid x `[P]` sign bytes -> `[G * P]` words of w signed int8 values.

    Word `g * P + p` holds row g with element j negated where bit j of `patterns[p]` is
    set; viewed as uint64 (w = 8) or uint32 (w = 4) so one `np.take` moves a whole group.
    """
    width = grid.shape[1]
    bits = (patterns[:, None] >> BIT_SHIFTS[None, :width]) & np.uint8(1)   # [P, w] 0/1
    signs = (1 - 2 * bits.astype(np.int8)).astype(np.int8)               # [P, w] +-1
    rows = grid[:, None, :] * signs[None]                                 # [G, P, w] int8
    return np.ascontiguousarray(rows, np.int8).reshape(-1).view(
        np.uint64 if width == 8 else np.uint32)


def _table(kind: str) -> np.ndarray:
    """The signed-row table a kernel gathers from (built on first use, then cached)."""
    table = _tables.get(kind)
    if table is None:
        g = grids()
        all_bytes = np.arange(256, dtype=np.uint8)
        nibbles = np.arange(16, dtype=np.uint8)
        if kind == "iq1s":
            # [delta sign, index, 8]: 8 grid + 1 (delta +0.125), then 8 grid - 1
            eight = g["iq1s"].view(np.int8) * np.int8(8)
            rows = np.stack([eight + np.int8(1), eight - np.int8(1)])
            table = np.ascontiguousarray(rows, np.int8).reshape(-1).view(np.uint64)
        elif kind in ("iq2xxs", "iq2xs"):
            table = _signed_rows(g[kind].view(np.int8), g["ksigns"].reshape(-1))
        elif kind == "iq2s":
            table = _signed_rows(g[kind].view(np.int8), all_bytes)
        else:  # iq3xxs, iq3s: 4-element groups take one nibble of a sign byte
            table = _signed_rows(g[kind].view(np.int8), nibbles)
        _tables[kind] = table
    return table


def _gather(kind: str, index: np.ndarray) -> np.ndarray:
    """Signed int8 codes `[n, groups * w]` for table indices `[n, ...]` (groups per block)."""
    table = _table(kind)
    groups = int(np.prod(index.shape[1:]))
    words = np.empty((index.shape[0], groups), table.dtype)
    # mode="clip" skips the buffered bounds check; every index is in range by construction
    np.take(table, index.reshape(words.shape), out=words, mode="clip")
    return words.view(np.int8)


def _spread(words: np.ndarray, count: int, step: int, mask: int) -> np.ndarray:
    """Unsigned ints `[...]` holding `count` (2 or 4) fields `step` <= 8 bits apart ->
    `[..., count]` uint8: `[..., i] = (words >> i step) & mask`.

    Field i is moved to byte i of a uint16/uint32 with whole-word shifts and masks (long
    SIMD loops), then the words are viewed as little-endian bytes. The obvious broadcast
    `(words[..., None] >> shifts) & mask` runs a `count`-element inner loop per word,
    several times slower.
    """
    wide = np.uint16 if count == 2 else np.uint32
    w = words.astype(wide)
    out = w & wide(mask)
    for i in range(1, count):
        out |= (w << wide(i * (8 - step))) & wide(mask << (8 * i))
    little = out.astype(out.dtype.newbyteorder("<"), copy=False)
    return little.view(np.uint8).reshape(words.shape + (count,))


def _half_plus(blocks: np.ndarray, ls: np.ndarray, step: float) -> np.ndarray:
    """`[n, k]` 4-bit scales -> `[n, k, 1]` f32 `d * (0.5 + ls) * step` (ggml's order)."""
    half = ls.astype(np.float32)
    half += np.float32(0.5)
    db = half_field(blocks, 0) * half                                     # [n, k] f32
    db *= np.float32(step)
    return db[:, :, None]


def _iq2_scales(blocks: np.ndarray, offset: int) -> np.ndarray:
    """IQ2_XS/IQ2_S: 8 scale bytes at `offset` -> `[n, 16, 1]` f32 `d * (0.5 + s) * 0.25`.

    Scale 2 ib + h (16 elements) is nibble h of byte ib.
    """
    n = blocks.shape[0]
    ls = _spread(blocks[:, offset:offset + 8], 2, 4, 0x0F)                # [n, 8, 2]
    return _half_plus(blocks, ls.reshape(n, 16), 0.25)


def _seven_bit_signs(aux: np.ndarray) -> np.ndarray:
    """`[n, 8]` u32 scale-and-sign words -> `[n, 8, 4]` uint8 ksigns indices (bits 7l..)."""
    return _spread(aux, 4, 7, 0x7F)


@register("dequantize", "IQ2_XXS")
def dequantize_iq2_xxs(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ2_XXS `[n, 66]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    aux = field(blocks, 6, "<u4", 15)[:, ::2].astype(np.uint32)           # [n, 8] bytes 4..7
    rows = np.empty((n, 32), np.uint8)                                    # bytes 0..3 of 8
    records(rows, 4)[...] = fields(np.ascontiguousarray(blocks), 2, (n, 8), (66, 8), 4)
    index = rows.astype(np.uint32)
    index <<= np.uint32(7)
    index |= _seven_bit_signs(aux).reshape(n, 32)                         # row * 128 + s
    codes = _gather("iq2xxs", index).reshape(n, 8, 32)
    db = _half_plus(blocks, aux >> np.uint32(28), 0.25)                   # [n, 8, 1]
    return scaled(db, codes, out, (n, 256))


@register("dequantize", "IQ2_XS")
def dequantize_iq2_xs(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ2_XS `[n, 74]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    qs = field(blocks, 2, "<u2", 32).astype(np.uint32)                    # [n, 32]
    # (qs & 511) * 128 + (qs >> 9): grid row, then ksigns index
    index = (qs & np.uint32(511)) << np.uint32(7)
    index |= qs >> np.uint32(9)
    codes = _gather("iq2xs", index).reshape(n, 16, 16)
    return scaled(_iq2_scales(blocks, 66), codes, out, (n, 256))


@register("dequantize", "IQ2_S")
def dequantize_iq2_s(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ2_S `[n, 82]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    # [n, 8, 4]: bits 2l..2l+1 of qh[ib] are index bits 8..9 of group 4 ib + l
    index = _spread(blocks[:, 66:74], 4, 2, 0x03).reshape(n, 32).astype(np.uint32)
    index <<= np.uint32(8)
    index |= blocks[:, 2:34]                                              # 10-bit grid row
    index <<= np.uint32(8)
    index |= blocks[:, 34:66]                                             # * 256 + signs
    codes = _gather("iq2s", index).reshape(n, 16, 16)
    return scaled(_iq2_scales(blocks, 74), codes, out, (n, 256))


def _or_nibbles(index: np.ndarray, sign_bytes: np.ndarray) -> None:
    """IQ3: `index [n, 2 k]` |= nibble j % 2 of `sign_bytes [n, k]` byte j // 2."""
    n, k = sign_bytes.shape
    index |= _spread(sign_bytes, 2, 4, 0x0F).reshape(n, 2 * k)


@register("dequantize", "IQ3_XXS")
def dequantize_iq3_xxs(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ3_XXS `[n, 98]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    aux = field(blocks, 66, "<u4", 8).astype(np.uint32)                   # [n, 8]
    sign = np.take(grids()["ksigns"].reshape(-1), _seven_bit_signs(aux))  # [n, 8, 4] u8
    index = blocks[:, 2:66].astype(np.uint32)                             # [n, 64]
    index <<= np.uint32(4)
    # grid qs[8 ib + 2 l + h] takes nibble h of group l's sign byte
    _or_nibbles(index, sign.reshape(n, 32))
    codes = _gather("iq3xxs", index).reshape(n, 8, 32)
    db = _half_plus(blocks, aux >> np.uint32(28), 0.5)                    # [n, 8, 1]
    return scaled(db, codes, out, (n, 256))


@register("dequantize", "IQ3_S")
def dequantize_iq3_s(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ3_S `[n, 110]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    # bit k of the little-endian qh bytes is index bit 8 of qs[k]: [n, 64] 0/1
    index = np.unpackbits(blocks[:, 66:74], axis=1, bitorder="little").astype(np.uint32)
    index <<= np.uint32(8)
    index |= blocks[:, 2:66]
    index <<= np.uint32(4)
    # sign byte s covers qs[2 s] (low nibble) and qs[2 s + 1] (high nibble)
    _or_nibbles(index, blocks[:, 74:106])
    codes = _gather("iq3s", index).reshape(n, 8, 32)
    odd = _spread(blocks[:, 106:110], 2, 4, 0x0F).reshape(n, 8)           # sub-block 2 i + h
    odd *= np.uint8(2)
    odd += np.uint8(1)                                                    # 1 + 2 sc <= 31
    db = scaled(half_field(blocks, 0), odd, None, (n, 8))                 # [n, 8] f32
    return scaled(db[:, :, None], codes, out, (n, 256))


def _iq1_scaled(d: np.ndarray, three: np.ndarray, index: np.ndarray,
                out: Optional[np.ndarray]) -> np.ndarray:
    """IQ1 tail: `[n, k]` 3-bit scales s, `[n, 32]` table indices (delta sign * 2048 +
    grid row) -> `(d * (2 s + 1) * 0.125) * (8 grid +- 1)` as `[n, 256]` f32."""
    n, k = three.shape
    odd = three.astype(np.uint8) * np.uint8(2)
    odd += np.uint8(1)
    dl = scaled(d, odd, None, (n, k))                                     # [n, k] d * (2s+1)
    dl *= np.float32(0.125)
    codes = _gather("iq1s", index).reshape(n, k, 256 // k)
    return scaled(dl[:, :, None], codes, out, (n, 256))


@register("dequantize", "IQ1_S")
def dequantize_iq1_s(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ1_S `[n, 50]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    qh = field(blocks, 34, "<u2", 8).astype(np.uint32)                    # [n, 8]
    high = _spread(qh, 4, 3, 0x07).reshape(n, 32)                        # index bits 8..10
    # the delta sign (bit 15) joins each of the 4 groups' fields as bit 3 (4 bytes at once)
    words = high.view("<u4")                                              # [n, 8]
    words |= ((qh >> np.uint32(15)) * np.uint32(0x08080808)).astype("<u4")
    index = high.astype(np.uint32)
    index <<= np.uint32(8)                                                # sign * 2048 + ...
    index |= blocks[:, 2:34]
    three = (qh >> np.uint32(12)) & np.uint32(7)                          # [n, 8]
    return _iq1_scaled(half_field(blocks, 0), three, index, out)


_IQ1M_D_SHIFTS = np.array([0, 4, 8, 12], dtype=np.uint16)


@register("dequantize", "IQ1_M")
def dequantize_iq1_m(blocks: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """IQ1_M `[n, 56]` uint8 -> `[n, 256]` float32."""
    n = blocks.shape[0]
    sc = field(blocks, 48, "<u2", 4).astype(np.uint16)                    # [n, 4]
    top = (sc >> np.uint16(12)) << _IQ1M_D_SHIFTS                         # [n, 4] nibbles
    d_bits = np.bitwise_or.reduce(top, axis=1).astype(np.uint16)          # [n] f16 bits
    d = d_bits.view(np.float16).astype(np.float32)[:, None]               # [n, 1] f32
    three = _spread(sc, 4, 3, 0x07)                                       # scale 4 w + i
    # nibble g % 2 of qh[g // 2] = delta sign (bit 3) | index bits 8..10: * 256 gives
    # exactly the table index sign * 2048 + row's high part
    index = _spread(blocks[:, 32:48], 2, 4, 0x0F).reshape(n, 32).astype(np.uint32)
    index <<= np.uint32(8)
    index |= blocks[:, 0:32]
    return _iq1_scaled(d, three.reshape(n, 16), index, out)


for _kernel in (dequantize_iq2_xxs, dequantize_iq2_xs, dequantize_iq2_s, dequantize_iq3_xxs,
                dequantize_iq3_s, dequantize_iq1_s, dequantize_iq1_m):
    _kernel.fills_out = True  # type: ignore[attr-defined]
