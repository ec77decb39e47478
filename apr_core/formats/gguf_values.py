"""GGUF metadata values: the value-type table, a bounded cursor, decoding and encoding.

A GGUF key/value pair is `string key, u32 type, value`. Scalars are little-endian fixed-size
numbers (`bool` is one byte, 0 or 1), a string is `u64 length + bytes`, an array is
`u32 element type, u64 count, elements` and arrays may nest. Python values are int, float,
bool, str and list; each key also gets a *type spec* so a file can be written back exactly:
a scalar spec is a short name ("u32", "f32", "str", ...), an array spec is
`["arr", <element spec>]` (nested: `["arr", ["arr", "i32"]]`). A bare "arr" spec means
"array, element type inferred from the values"; it appears as the element spec of an
*empty* array of arrays, whose inner element type the file does not record.

Strings are decoded as UTF-8 with `errors="surrogateescape"` and encoded the same way, so
invalid bytes survive a read/write round trip (and a JSON round trip, which escapes the
surrogates). Only the standard library is used (ARCHITECTURE §3: the format layer is stdlib).
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from ..errors import AprError, ErrorCode
from .gguf_cursor import Cursor
from .gguf_lazy import CHECKPOINT, GGUFArray

Spec = Union[str, List[Any]]

# Format constants shared by the reader (gguf.py) and the writer (gguf_write.py).
GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"

# Real files nest arrays at most twice; a cap keeps hostile nesting from exhausting the stack.
MAX_ARRAY_DEPTH = 8
# Arrays at least this long are kept raw and decoded on first access (gguf_lazy).
LAZY_MIN = 64


class ValueType(NamedTuple):
    """One GGUF value type: `size` is the fixed size, or the minimum size for str/arr."""

    type_id: int
    spec: str
    code: Optional[str]  # struct code for fixed-size types
    size: int


#          id   spec    struct  bytes
_TYPES = (
    ValueType(0, "u8", "B", 1),
    ValueType(1, "i8", "b", 1),
    ValueType(2, "u16", "H", 2),
    ValueType(3, "i16", "h", 2),
    ValueType(4, "u32", "I", 4),
    ValueType(5, "i32", "i", 4),
    ValueType(6, "f32", "f", 4),
    ValueType(7, "bool", "B", 1),
    ValueType(8, "str", None, 8),     # u64 length + bytes
    ValueType(9, "arr", None, 12),    # u32 element type + u64 count + elements
    ValueType(10, "u64", "Q", 8),
    ValueType(11, "i64", "q", 8),
    ValueType(12, "f64", "d", 8),
)
BY_ID: Dict[int, ValueType] = {row.type_id: row for row in _TYPES}
BY_SPEC: Dict[str, ValueType] = {row.spec: row for row in _TYPES}
STR = BY_SPEC["str"]
ARR = BY_SPEC["arr"]
BOOL = BY_SPEC["bool"]
_FLOATS = ("f32", "f64")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _int_range(row: ValueType) -> Tuple[int, int]:
    """Inclusive bounds of an integer type, from its struct code (lower case = signed)."""
    bits = 8 * row.size
    if row.code is not None and row.code.islower():
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def value_type(type_id: int, where: str) -> ValueType:
    row = BY_ID.get(type_id)
    if row is None:
        raise AprError(ErrorCode.FORMAT, "unknown GGUF metadata value type",
                       type_id=type_id, key=where)
    return row


def decode_str(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def encode_str(value: Any, where: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str):
        raise AprError(ErrorCode.ARGUMENT, "GGUF string value must be str or bytes",
                       key=where, type=type(value).__name__)
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise AprError(ErrorCode.ARGUMENT, "string is not encodable as UTF-8 "
                       "(lone surrogates other than surrogateescape bytes)", key=where)


# ---------------------------------------------------------------------------------------
# Reading

def read_value(cur: Cursor, row: ValueType, where: str, depth: int = 0) -> Tuple[Any, Spec]:
    """Decode one value of type `row` at the cursor; returns (value, spec)."""
    if row is STR:
        return decode_str(cur.string(where)), "str"
    if row is not ARR:
        return _read_scalars(cur, row, 1, where)[0], row.spec
    if depth >= MAX_ARRAY_DEPTH:
        raise AprError(ErrorCode.MEMORY, "GGUF arrays nested too deeply", key=where,
                       max_depth=MAX_ARRAY_DEPTH)
    elem = value_type(cur.u32(where), where)
    count = cur.u64(where)
    cur.promise(count * elem.size, where)   # every element needs at least elem.size bytes
    if elem is STR:
        if count >= LAZY_MIN:
            raw, marks = cur.skip_strings(count, 0, where, CHECKPOINT)
            return GGUFArray(raw, count, None, marks), ["arr", "str"]
        return [decode_str(cur.string(where, (count - index - 1) * STR.size))
                for index in range(count)], ["arr", "str"]
    if elem is not ARR:
        if count >= LAZY_MIN and elem is not BOOL:
            return (GGUFArray(cur.take(count * elem.size, where), count, elem.code),
                    ["arr", elem.spec])
        return _read_scalars(cur, elem, count, where), ["arr", elem.spec]
    items: List[Any] = []
    inner_spec: Optional[Spec] = None
    for index in range(count):
        cur.promise((count - index) * ARR.size, where)
        item, spec = read_value(cur, ARR, where, depth + 1)
        merged = spec if inner_spec is None else _merge_specs(inner_spec, spec)
        if merged is None:
            raise AprError(ErrorCode.UNSUPPORTED, "nested GGUF arrays of differing element "
                           "types cannot be represented", key=where, first=inner_spec,
                           other=spec, index=index)
        inner_spec = merged
        items.append(item)
    # An empty array of arrays does not record the inner element type: bare "arr".
    return items, ["arr", "arr" if inner_spec is None else inner_spec]


def _merge_specs(a: Spec, b: Spec) -> Optional[Spec]:
    """The one spec both inner arrays fit, or None. Bare "arr" (an empty array of arrays,
    inner type unrecorded) fits any array spec, so `[[[1]], []]` reads back consistently."""
    if a == b:
        return a
    if a == "arr" and isinstance(b, list):
        return b
    if b == "arr" and isinstance(a, list):
        return a
    if isinstance(a, list) and isinstance(b, list):
        inner = _merge_specs(a[1], b[1])
        return None if inner is None else ["arr", inner]
    return None


def _read_scalars(cur: Cursor, row: ValueType, count: int, where: str) -> List[Any]:
    data = cur.take(count * row.size, where)
    values = list(struct.unpack("<{}{}".format(count, row.code), data))
    if row is BOOL:
        if values and max(values) > 1:
            raise AprError(ErrorCode.FORMAT, "GGUF bool value is neither 0 nor 1", key=where)
        return [value == 1 for value in values]
    return values


# ---------------------------------------------------------------------------------------
# Type specs and writing

def normalize_spec(spec: Any, where: str) -> Spec:
    """Validate a type spec (JSON lists or tuples accepted) and return its canonical form."""
    if isinstance(spec, str):
        if spec in BY_SPEC:
            return spec
    elif isinstance(spec, (list, tuple)) and len(spec) == 2 and spec[0] == "arr":
        return ["arr", normalize_spec(spec[1], where)]
    raise AprError(ErrorCode.ARGUMENT, "invalid GGUF type spec", key=where, spec=repr(spec))


def infer_spec(value: Any, where: str) -> Spec:
    """The type a value is written with when no spec is given (see module docstring)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return _int_spec(value, value, where)
    if isinstance(value, float):
        return "f32"
    if isinstance(value, (str, bytes, bytearray)):
        return "str"
    if isinstance(value, (list, tuple)):
        return ["arr", _infer_elements(value, where)]
    raise AprError(ErrorCode.ARGUMENT, "cannot store this value in GGUF metadata",
                   key=where, type=type(value).__name__)


def _int_spec(low: int, high: int, where: str) -> str:
    for spec in ("i32", "i64", "u64"):
        lo, hi = _int_range(BY_SPEC[spec])
        if lo <= low and high <= hi:
            return spec
    raise AprError(ErrorCode.ARGUMENT, "integer does not fit any GGUF integer type",
                   key=where, low=low, high=high)


def _infer_elements(values: Any, where: str) -> Spec:
    if not values:
        raise AprError(ErrorCode.ARGUMENT, "an empty list needs an explicit type in kv_types",
                       key=where)
    kinds = set()
    for item in values:
        if isinstance(item, bool):
            kinds.add("bool")
        elif isinstance(item, int):
            kinds.add("int")
        elif isinstance(item, float):
            kinds.add("float")
        elif isinstance(item, (str, bytes, bytearray)):
            kinds.add("str")
        elif isinstance(item, (list, tuple)):
            kinds.add("list")
        else:
            kinds.add(type(item).__name__)
    if kinds == {"int"}:
        return _int_spec(min(values), max(values), where)
    if kinds <= {"int", "float"}:
        return "f32"
    if kinds in ({"bool"}, {"str"}):
        return kinds.pop()
    if kinds == {"list"}:
        # Every inner array shares one element type: infer it over all inner values.
        return ["arr", _infer_elements([x for inner in values for x in inner], where)]
    raise AprError(ErrorCode.ARGUMENT, "list mixes values of different kinds; give kv_types",
                   key=where, kinds=",".join(sorted(kinds)))


def encode_value(value: Any, spec: Spec, where: str) -> bytes:
    """The bytes of `value` written as `spec` (without the leading u32 type id)."""
    if isinstance(spec, list):
        return _encode_array(value, spec[1], where)
    if spec == "arr":
        return _encode_array(value, None, where)
    row = BY_SPEC[spec]
    if row is STR:
        raw = encode_str(value, where)
        return _U64.pack(len(raw)) + raw
    return _pack_scalars([value], row, where)


def spec_type_id(spec: Spec) -> int:
    return ARR.type_id if isinstance(spec, list) else BY_SPEC[spec].type_id


def _encode_array(value: Any, elem: Optional[Spec], where: str) -> bytes:
    if not isinstance(value, (list, tuple)):
        raise AprError(ErrorCode.ARGUMENT, "GGUF array value must be a list", key=where,
                       type=type(value).__name__)
    if elem is None:
        elem = _infer_elements(value, where)
    head = _U32.pack(spec_type_id(elem)) + _U64.pack(len(value))
    if isinstance(elem, list) or elem in ("str", "arr"):
        return head + b"".join(encode_value(item, elem, where) for item in value)
    return head + _pack_scalars(value, BY_SPEC[elem], where)


def _pack_scalars(values: Any, row: ValueType, where: str) -> bytes:
    """Pack fixed-size scalars after checking each one's Python type and range."""
    if row is BOOL:
        for item in values:
            if not (isinstance(item, int) and item in (0, 1)):
                raise AprError(ErrorCode.ARGUMENT, "GGUF bool value must be True or False",
                               key=where, value=repr(item))
        return bytes(1 if item else 0 for item in values)
    if row.spec in _FLOATS:
        for item in values:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise AprError(ErrorCode.ARGUMENT, "GGUF float value must be a number",
                               key=where, spec=row.spec, value=repr(item))
    else:
        low, high = _int_range(row)
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
                raise AprError(ErrorCode.ARGUMENT, "value does not fit the GGUF integer type",
                               key=where, spec=row.spec, value=repr(item))
    try:
        return struct.pack("<{}{}".format(len(values), row.code), *values)
    except (struct.error, OverflowError) as exc:
        raise AprError(ErrorCode.ARGUMENT, "value does not fit the GGUF type: {}".format(exc),
                       key=where, spec=row.spec)


__all__ = ["GGUF_MAGIC", "SUPPORTED_VERSIONS", "DEFAULT_ALIGNMENT", "ALIGNMENT_KEY",
           "ValueType", "BY_ID", "BY_SPEC", "MAX_ARRAY_DEPTH", "Cursor", "value_type",
           "read_value", "normalize_spec", "infer_spec", "encode_value", "spec_type_id",
           "decode_str", "encode_str", "Spec"]
