"""THE dtype table: every element type any supported format can hold, in one place.

Each row names the type once and gives its id in each format that has it (APR v2, GGUF's
`ggml_type`, SafeTensors' dtype string), its block geometry (elements per block, bytes per
block) and, for plain element types, the numpy dtype string. APR ids follow ARCHITECTURE §4;
APR ids 10 and 11 are read aliases of Q8_0 and Q4_0 and are never written. No other module
branches over dtypes: look the row up here.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

from .errors import AprError, ErrorCode


class DType(NamedTuple):
    """One element type. `block_size` elements are stored in `type_size` bytes."""

    name: str
    apr_id: Optional[int]
    gguf_id: Optional[int]
    st_name: Optional[str]
    block_size: int
    type_size: int
    numpy: Optional[str]  # numpy dtype string for plain (non-block) types

    @property
    def quantized(self) -> bool:
        return self.block_size > 1

    def nbytes(self, shape: Tuple[int, ...]) -> int:
        """Bytes needed for a row-major tensor of `shape` (rows must hold whole blocks)."""
        count = 1
        for dim in shape:
            count *= dim
        if self.block_size > 1:
            inner = shape[-1] if shape else 1
            if inner % self.block_size:
                raise AprError(ErrorCode.FORMAT,
                               "innermost dimension is not a whole number of blocks",
                               dtype=self.name, dim=inner, block_size=self.block_size)
        return count // self.block_size * self.type_size


#        name        apr   gguf  safetensors  block bytes numpy
_ROWS = (
    DType("F32",      0,    0,   "F32",       1,   4,   "<f4"),
    DType("F16",      1,    1,   "F16",       1,   2,   "<f2"),
    DType("BF16",     2,   30,   "BF16",      1,   2,   None),
    DType("I8",       3,   24,   "I8",        1,   1,   "i1"),
    DType("I16",      4,   25,   "I16",       1,   2,   "<i2"),
    DType("I32",      5,   26,   "I32",       1,   4,   "<i4"),
    DType("I64",      6,   27,   "I64",       1,   8,   "<i8"),
    DType("U8",       7,   None, "U8",        1,   1,   "u1"),
    DType("Q4_K",     8,   12,   None,      256, 144,   None),
    DType("Q6_K",     9,   14,   None,      256, 210,   None),
    DType("Q5_K",    12,   13,   None,      256, 176,   None),
    DType("Q2_K",    13,   10,   None,      256,  84,   None),
    DType("Q3_K",    14,   11,   None,      256, 110,   None),
    DType("Q8_0",    16,    8,   None,       32,  34,   None),
    DType("Q4_0",    17,    2,   None,       32,  18,   None),
    DType("Q4_1",    18,    3,   None,       32,  20,   None),
    DType("Q5_0",    19,    6,   None,       32,  22,   None),
    DType("Q5_1",    20,    7,   None,       32,  24,   None),
    # GGUF-only types: readable from GGUF, no APR v2 id (ARCHITECTURE §4).
    DType("Q8_1",    None,  9,   None,       32,  40,   None),
    DType("Q8_K",    None, 15,   None,      256, 292,   None),
    DType("IQ2_XXS", None, 16,   None,      256,  66,   None),
    DType("IQ2_XS",  None, 17,   None,      256,  74,   None),
    DType("IQ3_XXS", None, 18,   None,      256,  98,   None),
    DType("IQ1_S",   None, 19,   None,      256,  50,   None),
    DType("IQ4_NL",  None, 20,   None,       32,  18,   None),
    DType("IQ3_S",   None, 21,   None,      256, 110,   None),
    DType("IQ2_S",   None, 22,   None,      256,  82,   None),
    DType("IQ4_XS",  None, 23,   None,      256, 136,   None),
    DType("F64",     None, 28,   "F64",       1,   8,   "<f8"),
    DType("IQ1_M",   None, 29,   None,      256,  56,   None),
    DType("TQ1_0",   None, 34,   None,      256,  54,   None),
    DType("TQ2_0",   None, 35,   None,      256,  66,   None),
    DType("MXFP4",   None, 39,   None,       32,  17,   None),
    DType("NVFP4",   None, 40,   None,       64,  36,   None),
    # SafeTensors-only types.
    DType("BOOL",    None, None, "BOOL",      1,   1,   "?"),
    DType("U16",     None, None, "U16",       1,   2,   "<u2"),
    DType("U32",     None, None, "U32",       1,   4,   "<u4"),
    DType("U64",     None, None, "U64",       1,   8,   "<u8"),
    DType("F8_E4M3", None, None, "F8_E4M3",   1,   1,   None),
    DType("F8_E5M2", None, None, "F8_E5M2",   1,   1,   None),
)

# APR ids accepted on read only (seed 002's numbering), never written.
_APR_READ_ALIASES = {10: "Q8_0", 11: "Q4_0"}

BY_NAME: Dict[str, DType] = {row.name: row for row in _ROWS}
BY_APR_ID: Dict[int, DType] = {row.apr_id: row for row in _ROWS if row.apr_id is not None}
BY_APR_ID.update({alias: BY_NAME[name] for alias, name in _APR_READ_ALIASES.items()})
BY_GGUF_ID: Dict[int, DType] = {row.gguf_id: row for row in _ROWS if row.gguf_id is not None}
BY_ST_NAME: Dict[str, DType] = {row.st_name: row for row in _ROWS if row.st_name is not None}

ALL = _ROWS


def by_name(name: str) -> DType:
    """Look a dtype up by name, case-insensitively (`"q4_k"` -> Q4_K)."""
    row = BY_NAME.get(str(name).upper())
    if row is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown dtype name", dtype=name)
    return row


def from_apr_id(dtype_id: int) -> DType:
    row = BY_APR_ID.get(dtype_id)
    if row is None:
        raise AprError(ErrorCode.FORMAT, "unsupported APR dtype id", dtype_id=dtype_id)
    return row


def from_gguf_id(type_id: int) -> DType:
    row = BY_GGUF_ID.get(type_id)
    if row is None:
        raise AprError(ErrorCode.FORMAT, "unsupported GGUF tensor type", type_id=type_id)
    return row


def from_st_name(name: str) -> DType:
    row = BY_ST_NAME.get(name)
    if row is None:
        raise AprError(ErrorCode.FORMAT, "unsupported SafeTensors dtype", dtype=name)
    return row


def apr_id_for_write(dtype: DType) -> int:
    """The APR id to write for `dtype`; types without one cannot be stored in APR v2."""
    if dtype.apr_id is None:
        raise AprError(ErrorCode.UNSUPPORTED, "dtype has no APR v2 id; convert it first",
                       dtype=dtype.name)
    return dtype.apr_id


def gguf_id_for_write(dtype: DType) -> int:
    if dtype.gguf_id is None:
        raise AprError(ErrorCode.UNSUPPORTED, "dtype cannot be stored in GGUF", dtype=dtype.name)
    return dtype.gguf_id


def st_name_for_write(dtype: DType) -> str:
    if dtype.st_name is None:
        raise AprError(ErrorCode.UNSUPPORTED, "dtype cannot be stored in SafeTensors",
                       dtype=dtype.name)
    return dtype.st_name
