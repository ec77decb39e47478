"""Hypothesis fuzzing of the GGUF reader and writer (runs in well under 30 s).

Random and mutated input may only ever raise AprError; any file the reader accepts can be
written back, and writing is then a fixed point. Random KV pairs with explicit types
survive write -> read -> write byte for byte.
"""
from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core import dtypes
from apr_core.errors import AprError
from apr_core.formats.gguf import read_gguf, write_gguf_bytes
from apr_core.tensor import RawTensor

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _seed_file() -> bytes:
    tensors = [RawTensor("w", dtypes.by_name("F32"), (2, 3), bytes(range(24))),
               RawTensor("q", dtypes.by_name("Q8_0"), (1, 32), bytes(range(34))),
               RawTensor("h", dtypes.by_name("F16"), (5,), bytes(10))]
    kv = {"general.architecture": "llama", "n": 7, "f": 0.5, "b": True,
          "toks": ["a", "bc", ""], "ids": [1, 2, 3], "nest": [[1], [2, 3]],
          "u8s": [1, 2], "big": 2 ** 40}
    return write_gguf_bytes(tensors, kv, {"u8s": ["arr", "u8"]})


SEED = _seed_file()
_INTERESTING = [0, 1, 2, 3, 7, 8, 9, 12, 13, 31, 32, 33, 255, 2 ** 31, 2 ** 32 - 1, 2 ** 32,
                2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, len(SEED), len(SEED) * 8]


def _exercise(data: bytes) -> None:
    """Parse, read every tensor, and for accepted files check the writer's fixed point."""
    try:
        gguf = read_gguf(data)
        tensors = [gguf.read_raw(name) for name in gguf.tensors]
    except AprError:
        return
    if gguf.alignment > 4096:   # legal, but re-writing would pad up to gigabytes
        return
    canonical = write_gguf_bytes(tensors, gguf.metadata, gguf.kv_types, gguf.alignment,
                                 gguf.version)
    again = read_gguf(canonical)
    assert list(again.tensors) == list(gguf.tensors)
    assert write_gguf_bytes(again.lazy_tensors(), again.metadata, again.kv_types,
                            again.alignment, again.version) == canonical


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data):
    _exercise(data)
    _exercise(b"GGUF\x03\x00\x00\x00" + data)


_edit = st.one_of(
    st.tuples(st.just("set"), st.integers(0, len(SEED) - 1), st.integers(0, 255)),
    st.tuples(st.just("u32"), st.integers(0, len(SEED) - 4), st.sampled_from(_INTERESTING)),
    st.tuples(st.just("u64"), st.integers(0, len(SEED) - 8), st.sampled_from(_INTERESTING)),
    st.tuples(st.just("del"), st.integers(0, len(SEED) - 1), st.integers(1, 16)),
    st.tuples(st.just("ins"), st.integers(0, len(SEED)), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("cut"), st.integers(0, len(SEED)), st.just(0)),
)


def _apply(data: bytearray, edit) -> bytearray:
    kind, pos, arg = edit
    pos = min(pos, len(data))
    if kind == "set" and pos < len(data):
        data[pos] = arg
    elif kind == "u32" and pos + 4 <= len(data):
        data[pos:pos + 4] = struct.pack("<I", arg % 2 ** 32)
    elif kind == "u64" and pos + 8 <= len(data):
        data[pos:pos + 8] = struct.pack("<Q", arg)
    elif kind == "del":
        del data[pos:pos + arg]
    elif kind == "ins":
        data[pos:pos] = arg
    elif kind == "cut":
        del data[pos:]
    return data


@FUZZ
@given(st.lists(_edit, min_size=1, max_size=4))
def test_mutated_valid_file(edits):
    data = bytearray(SEED)
    for edit in edits:
        data = _apply(data, edit)
    _exercise(bytes(data))


_SCALARS = {
    "u8": st.integers(0, 255), "i8": st.integers(-128, 127),
    "u16": st.integers(0, 2 ** 16 - 1), "i16": st.integers(-2 ** 15, 2 ** 15 - 1),
    "u32": st.integers(0, 2 ** 32 - 1), "i32": st.integers(-2 ** 31, 2 ** 31 - 1),
    "u64": st.integers(0, 2 ** 64 - 1), "i64": st.integers(-2 ** 63, 2 ** 63 - 1),
    "f32": st.floats(width=32, allow_nan=False), "f64": st.floats(allow_nan=False),
    "bool": st.booleans(), "str": st.text(max_size=12),
}


def _typed(depth: int):
    """(spec, value) pairs, arrays nested up to `depth` levels."""
    scalar = st.sampled_from(sorted(_SCALARS)).flatmap(
        lambda spec: st.tuples(st.just(spec), _SCALARS[spec]))
    if depth == 0:
        return scalar
    inner = _typed(depth - 1)
    array = inner.flatmap(lambda sv: st.tuples(
        st.just(["arr", sv[0]]),
        st.lists(_typed_value(sv[0]), max_size=4)))
    return st.one_of(scalar, array)


def _typed_value(spec):
    if isinstance(spec, list):
        return st.lists(_typed_value(spec[1]), max_size=3)
    return _SCALARS[spec]


@settings(FUZZ, max_examples=120)
@given(st.dictionaries(st.text(min_size=1, max_size=10), _typed(3), max_size=5))
def test_typed_kv_round_trip(pairs):
    kv = {key: value for key, (_, value) in pairs.items()}
    types = {key: spec for key, (spec, _) in pairs.items()}
    data = write_gguf_bytes([], kv, types)
    back = read_gguf(data)
    assert back.metadata == kv
    assert write_gguf_bytes([], back.metadata, back.kv_types) == data
