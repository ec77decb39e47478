"""Malformed and hostile GGUF input, and invalid writer arguments: each gets one ErrorCode.

Files are assembled byte by byte from the GGUF spec (helpers below), so every field can be
made wrong on purpose. Nothing here needs gguf-py or numpy.
"""
from __future__ import annotations

import os
import struct

import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.gguf import read_gguf, write_gguf, write_gguf_bytes
from apr_core.tensor import RawTensor

E001, E002, E003, E008, E009, E011 = (ErrorCode.E001, ErrorCode.E002, ErrorCode.E003,
                                      ErrorCode.E008, ErrorCode.E009, ErrorCode.E011)
U8, I32, U32, U64, BOOL, STR, ARR = 0, 5, 4, 10, 7, 8, 9   # GGUF value type ids
F32, Q8_0 = 0, 8                                           # ggml tensor type ids


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def gstr(text):
    raw = text.encode() if isinstance(text, str) else text
    return u64(len(raw)) + raw


def kv(key, type_id, payload):
    return gstr(key) + u32(type_id) + payload


def tinfo(name, dims, type_id=F32, offset=0):
    return gstr(name) + u32(len(dims)) + b"".join(u64(d) for d in dims) + u32(type_id) + u64(offset)


def build(kvs=(), infos=(), data=b"", version=3, magic=b"GGUF", n_tensors=None, n_kv=None,
          alignment=32):
    head = (magic + u32(version) + u64(len(infos) if n_tensors is None else n_tensors)
            + u64(len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(infos))
    return head + bytes(-len(head) % alignment) + data


def nested(depth):
    """A u32 value wrapped in `depth` single-element arrays."""
    payload = u32(7)
    for level in range(depth):
        payload = u32(ARR if level else U32) + u64(1) + payload
    return payload


def code_of(data, **kwargs):
    with pytest.raises(AprError) as info:
        read_gguf(data, **kwargs)
    return info.value.code


def test_builder_makes_valid_files():
    f = read_gguf(build([kv("a", U32, u32(5)), kv("n", ARR, nested(8))],
                        [tinfo("w", [4, 2])], bytes(range(32))))
    assert f.metadata == {"a": 5, "n": [[[[[[[[7]]]]]]]]}
    assert f.tensors["w"].shape == (2, 4) and f.read_raw("w").data == bytes(range(32))
    assert read_gguf(build()).tensors == {}   # 24-byte file: no KV pairs, no tensors


@pytest.mark.parametrize("data, code", [
    (b"GGUX" + bytes(28), E001),
    (b"\x00" * 32, E001),
    (b"\x08\x00\x00\x00\x00\x00\x00\x00{}", E001),              # a SafeTensors header
    (build(version=1), E003),
    (build(version=0), E003),
    (build(version=4), E003),
    (b"GGUF" + struct.pack(">I", 3) + bytes(16), E009),         # big-endian v3
    (b"GGUF" + struct.pack(">I", 2) + bytes(16), E009),
    (b"", E002), (b"GG", E002), (b"GGUF\x03", E002),
])
def test_header_errors(data, code):
    assert code_of(data) == code


def _small_valid():
    kvs = [kv("general.name", STR, gstr("tiny")), kv("ids", ARR, u32(I32) + u64(3) + bytes(12)),
           kv("words", ARR, u32(STR) + u64(2) + gstr("ab") + gstr("")), kv("b", BOOL, b"\x01")]
    infos = [tinfo("a", [8]), tinfo("b", [32, 1], Q8_0, 32)]
    return build(kvs, infos, bytes(range(32)) + bytes(range(34)))


def test_every_truncation_is_corrupt():
    data = _small_valid()
    end = len(data)
    read_gguf(data)
    for cut in range(end):
        assert code_of(data[:cut]) == E002, cut


def test_bit_flips_in_header_raise_only_apr_errors():
    data = _small_valid()
    header = read_gguf(data).header_size
    allowed = {E001, E002, E003, E008, E009}
    for offset in range(header):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[offset] ^= 1 << bit
            try:
                f = read_gguf(bytes(flipped))
                for name in f.tensors:
                    f.read_raw(name)
            except AprError as exc:
                assert exc.code in allowed, (offset, bit, exc)


BIG = 2 ** 64 - 1


@pytest.mark.parametrize("data, code", [
    (build(n_tensors=2 ** 63), E002),
    (build(n_tensors=BIG), E002),
    (build(n_kv=BIG), E002),
    (build([kv("a", U32, u32(1))], n_kv=2, alignment=1), E002),
    (build([u64(2 ** 63) + b"key"]), E002),                                 # key length
    (build([kv("s", STR, u64(2 ** 62) + b"abc")]), E002),                 # string length
    (build([kv("a", ARR, u32(U64) + u64(2 ** 61))]), E002),               # array count
    (build([kv("a", ARR, u32(STR) + u64(2 ** 60))]), E002),
    (build([kv("a", ARR, u32(ARR) + u64(BIG))]), E002),
    (build(n_tensors=3), E002),
    (build([kv("t", 13, u32(0))]), E001),                                 # unknown value type
    (build([kv("t", 0xFFFFFFFF, u32(0))]), E001),
    (build([kv("a", ARR, u32(13) + u64(1) + u32(0))]), E001),
    (build([kv("b", BOOL, b"\x02")]), E001),
    (build([kv("k", U8, b"\x01"), kv("k", U8, b"\x02")]), E001),            # duplicate key
    (build([kv("n", ARR, nested(9))]), E008),                              # nesting depth
    (build([kv("n", ARR, nested(5000))]), E008),
    (build([kv("n", ARR, u32(ARR) + u64(2) + u32(I32) + u64(0) + u32(U8) + u64(0))]), E009),
    (build(infos=[tinfo("w", [4], type_id=4)], data=bytes(32)), E001),     # removed Q4_2
    (build(infos=[tinfo("w", [4], type_id=99)], data=bytes(32)), E001),
    (build(infos=[tinfo("w", [4], type_id=0xFFFFFFFF)], data=bytes(32)), E001),
    (build(infos=[tinfo("w", [1] * 9)], data=bytes(32)), E001),           # n_dims 9
    (build(infos=[gstr("w") + u32(0xFFFFFFFF)]), E001),
    (build(infos=[tinfo("w", [2 ** 63, 1])]), E001),                       # dim >= 2**63
    (build(infos=[tinfo("w", [2 ** 32, 2 ** 32])]), E001),                 # count >= 2**63
    (build(infos=[tinfo("w", [33], Q8_0)], data=bytes(64)), E001),        # partial block
    (build(infos=[tinfo("w", [4], offset=64)], data=bytes(32)), E002),    # beyond EOF
    (build(infos=[tinfo("w", [16])], data=bytes(32)), E002),              # runs past EOF
    (build(infos=[tinfo("w", [2 ** 40])], data=bytes(32)), E002),
    (build(infos=[tinfo("a", [16]), tinfo("b", [8], offset=32)], data=bytes(96)), E002),
    (build(infos=[tinfo("a", [8]), tinfo("b", [8])], data=bytes(64)), E002),   # overlap
    (build(infos=[tinfo("w", [4], offset=4)], data=bytes(64)), E001),     # misaligned
    (build([kv("general.alignment", U32, u32(64))], [tinfo("w", [4], offset=32)],
           bytes(128), alignment=64), E001),
    (build(infos=[tinfo("w", [4]), tinfo("w", [4], offset=32)], data=bytes(64)), E001),
    (build(infos=[tinfo(b"\xff\xfe", [4])], data=bytes(32)), E001),       # name not UTF-8
    (build([kv("general.alignment", U32, u32(0))]), E001),
    (build([kv("general.alignment", U32, u32(3))]), E001),
    (build([kv("general.alignment", U32, u32(0xFFFFFFFF))]), E001),
    (build([kv("general.alignment", U64, u64(32))]), E001),              # wrong type
])
def test_hostile_files(data, code):
    assert code_of(data) == code


def test_header_size_cap():
    data = build([kv("s", STR, gstr("x" * 500))])
    assert read_gguf(data).metadata["s"] == "x" * 500
    assert code_of(data, max_header_bytes=300) == E008


def test_invalid_utf8_key_and_value_round_trip():
    data = build([kv(b"k\xff", STR, gstr(b"v\xc3\x28\xed\xa0\x80"))])
    f = read_gguf(data)
    assert list(f.metadata) == ["k\udcff"]
    assert write_gguf_bytes([], f.metadata, f.kv_types) == data


def _t(name="w", dtype="F32", shape=(2,), data=None):
    dt = dtypes.by_name(dtype)
    return RawTensor(name, dt, shape, bytes(dt.nbytes(shape)) if data is None else data)


@pytest.mark.parametrize("kwargs, code", [
    (dict(kv={"e": []}), E011),
    (dict(kv={"e": [[], []]}), E011),
    (dict(kv={"m": [1, "a"]}), E011),
    (dict(kv={"m": [True, 1]}), E011),
    (dict(kv={"m": [-1, 2 ** 63]}), E011),
    (dict(kv={"x": 2 ** 64}), E011),
    (dict(kv={"x": -2 ** 63 - 1}), E011),
    (dict(kv={"x": None}), E011),
    (dict(kv={"x": 300}, kv_types={"x": "u8"}), E011),
    (dict(kv={"x": -1}, kv_types={"x": "u32"}), E011),
    (dict(kv={"x": 1.5}, kv_types={"x": "i32"}), E011),
    (dict(kv={"x": True}, kv_types={"x": "i32"}), E011),
    (dict(kv={"x": 5}, kv_types={"x": "str"}), E011),
    (dict(kv={"x": 2}, kv_types={"x": "bool"}), E011),
    (dict(kv={"x": 1e39}, kv_types={"x": "f32"}), E011),
    (dict(kv={"x": "a"}, kv_types={"x": "f64"}), E011),
    (dict(kv={"x": 1}, kv_types={"x": ["arr", "i32"]}), E011),
    (dict(kv={"x": [1, 300]}, kv_types={"x": ["arr", "u8"]}), E011),
    (dict(kv={"x": 1}, kv_types={"x": "u128"}), E011),
    (dict(kv={"x": [1]}, kv_types={"x": ["arr"]}), E011),
    (dict(kv={"x": 1}, kv_types={"y": "u8"}), E011),
    (dict(kv={"x": "\ud800"}), E011),
    (dict(kv={1: 1}), E011),
    (dict(kv=[("a", 1)]), E011),
    (dict(kv={}, alignment=0), E011),
    (dict(kv={}, alignment=3), E011),
    (dict(kv={}, alignment=2 ** 32), E011),
    (dict(kv={}, alignment=True), E011),
    (dict(kv={"general.alignment": 64}, alignment=32), E011),
    (dict(kv={"general.alignment": 48}), E011),
    (dict(kv={"general.alignment": 64}, kv_types={"general.alignment": "i32"}), E011),
    (dict(kv={}, version=1), E011),
    (dict(kv={}, version=4), E011),
    (dict(kv={}, tensors=[_t(), _t()]), E011),
    (dict(kv={}, tensors=[_t(data=b"abc")]), E011),
    (dict(kv={}, tensors=[_t(name=7)]), E011),
    (dict(kv={}, tensors=[_t(name="\udcff")]), E011),
    (dict(kv={}, tensors=[("w", "F32", (1,), b"1234")]), E011),
    (dict(kv={}, tensors=[_t(dtype="U8")]), E009),
    (dict(kv={}, tensors=[RawTensor("q", dtypes.by_name("Q8_0"), (33,), b"")]), E001),
    (dict(kv={}, tensors=[RawTensor("w", dtypes.by_name("F32"), (1,) * 9, b"1234")]), E001),
])
def test_writer_rejects(kwargs, code):
    kwargs.setdefault("tensors", [])
    with pytest.raises(AprError) as info:
        write_gguf_bytes(**kwargs)
    assert info.value.code == code


def test_writer_is_atomic(tmp_path):
    path = str(tmp_path / "out.gguf")
    bad = [_t("a"), _t("b", data=b"short")]
    with pytest.raises(AprError):
        write_gguf(path, bad, {})
    assert not os.path.exists(path)
    write_gguf(path, [_t("a")], {"k": 1})
    before = open(path, "rb").read()
    with pytest.raises(AprError):
        write_gguf(path, bad, {})
    with pytest.raises(AprError) as info:
        write_gguf(path, [_t("a")], {}, overwrite=False)
    assert info.value.code == E011
    assert open(path, "rb").read() == before and os.listdir(str(tmp_path)) == ["out.gguf"]


def test_inferred_types():
    f = read_gguf(write_gguf_bytes([], {
        "b": True, "i": -(2 ** 31), "j": 2 ** 31, "u": 2 ** 64 - 1, "f": 2.0, "s": b"\xff",
        "l": [1, 2.5], "n": [[True], [False, True]], "w": [[1], [2 ** 40]], "t": ("a", "b"),
        "d": [[[1]], [], [[]], [[2, 3], []]]}))
    assert f.kv_types == {"b": "bool", "i": "i32", "j": "i64", "u": "u64", "f": "f32",
                          "s": "str", "l": ["arr", "f32"], "n": ["arr", ["arr", "bool"]],
                          "w": ["arr", ["arr", "i64"]], "t": ["arr", "str"],
                          "d": ["arr", ["arr", ["arr", "i32"]]]}
    assert f.metadata["s"] == "\udcff" and f.metadata["w"] == [[1], [2 ** 40]]
    assert f.metadata["d"] == [[[1]], [], [[]], [[2, 3], []]]
    assert write_gguf_bytes([], f.metadata, f.kv_types) == write_gguf_bytes([], f.metadata)
