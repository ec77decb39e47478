"""Sharded APR v2 models: manifest + shards, integrity checks, all-or-nothing writes."""
from __future__ import annotations

import hashlib
import os
import random

import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats import flags as F
from apr_core.formats.apr2 import read_apr2, write_apr2
from apr_core.formats import shards
from apr_core.formats.shards import read_sharded, shard_names, write_sharded
from apr_core.tensor import LazyTensor, RawTensor

F32, U8, Q8_0 = dtypes.BY_NAME["F32"], dtypes.BY_NAME["U8"], dtypes.BY_NAME["Q8_0"]


def rand_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).getrandbits(8 * n).to_bytes(n, "little") if n else b""


def model_tensors():
    """Seven tensors of 4-16 KB (one quantized, one compressible), in a non-sorted order."""
    specs = [("tok_embd", F32, (64, 64)), ("blk.0.attn_q", Q8_0, (32, 64)),
             ("blk.0.ffn_up", F32, (32, 64)), ("blk.1.attn_q", Q8_0, (32, 64)),
             ("blk.1.ffn_up", F32, (32, 64)), ("norm", F32, (1024,)), ("out", F32, (16, 64))]
    tensors = [RawTensor(name, dtype, shape, rand_bytes(dtype.nbytes(shape), i))
               for i, (name, dtype, shape) in enumerate(specs)]
    tensors[5] = RawTensor("norm", F32, (1024,), bytes(4096))
    return tensors


META = {"model_type": "llama", "architecture": {"n_layer": 2}, "vocab": ["a", "é", "🙂"]}


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_round_trip_over_three_or_more_shards(tmp_path, compression):
    tensors = model_tensors()
    result = write_sharded(tmp_path / "model.apr", tensors, META, max_shard_size=20000,
                           compression=compression)
    count = len(result.files)
    assert count >= 3
    assert sorted(os.listdir(tmp_path)) == sorted(["model.apr"] + shard_names("model.apr",
                                                                               count))
    assert all(os.path.getsize(path) <= 20000 for path in result.files)
    model = read_sharded(tmp_path / "model.apr")
    assert set(model.tensors) == {t.name for t in tensors}
    for tensor in tensors:
        got = model.read_raw(tensor.name)
        assert (got.dtype, got.shape, got.data) == (tensor.dtype, tensor.shape, tensor.data)
    for key, value in META.items():
        assert model.metadata[key] == value
    assert model.metadata["sharded"] is True and model.metadata["shard_count"] == count
    mapping = model.metadata["tensor_shard_map"]
    assert list(mapping) == [t.name for t in tensors]  # packed in the given order
    assert list(mapping.values()) == sorted(mapping.values())
    for entry, path in zip(model.metadata["shards"], result.files):
        blob = open(path, "rb").read()
        assert entry["size"] == len(blob)
        assert entry["sha256"] == hashlib.sha256(blob).hexdigest()
        assert int(entry["crc32"], 16) == int.from_bytes(blob[-16:-12], "little")
        shard = read_apr2(path)  # each shard is a self-contained APR v2 file
        assert not shard.is_sharded and shard.metadata["shard_count"] == count
        shard.close()
    model.close()
    manifest = read_apr2(tmp_path / "model.apr")
    assert manifest.is_sharded and manifest.flags & F.SHARDED and manifest.tensors == {}
    manifest.close()


def test_oversized_tensor_gets_its_own_shard(tmp_path):
    tensors = [RawTensor("a", U8, (100,), bytes(100)), RawTensor("big", U8, (5000,),
                                                                 bytes(5000)),
               RawTensor("c", U8, (100,), bytes(100)), RawTensor("d", U8, (100,), bytes(100))]
    write_sharded(tmp_path / "m.apr", tensors, {}, max_shard_size=2000)
    model = read_sharded(tmp_path / "m.apr")
    assert model.metadata["tensor_shard_map"] == {"a": 0, "big": 1, "c": 2, "d": 2}
    assert model.read_raw("big").data == bytes(5000)
    model.close()


def test_empty_model_and_bad_arguments(tmp_path):
    write_sharded(tmp_path / "e.apr", [], {"x": 1})
    model = read_sharded(tmp_path / "e.apr")
    assert model.tensors == {} and model.metadata["shard_count"] == 1
    model.close()
    with pytest.raises(AprError) as info:
        write_sharded(tmp_path / "f.apr", [], {}, max_shard_size=100)
    assert info.value.code is ErrorCode.ARGUMENT
    same = RawTensor("a", U8, (1,), b"\0")
    with pytest.raises(AprError) as info:  # duplicates across shards are caught up front
        write_sharded(tmp_path / "g.apr", [same, same], {}, max_shard_size=1000)
    assert info.value.code is ErrorCode.ARGUMENT
    assert sorted(os.listdir(tmp_path)) == ["e-00001-of-00001.apr", "e.apr"]


def test_reading_through_an_opener(tmp_path):
    tensors = model_tensors()
    result = write_sharded(tmp_path / "m.apr", tensors, META, max_shard_size=20000)
    blobs = {os.path.basename(p): open(p, "rb").read() for p in result.files}
    manifest = (tmp_path / "m.apr").read_bytes()
    model = read_sharded(manifest, opener=blobs.__getitem__)
    assert model.read_raw("out").data == tensors[-1].data
    with pytest.raises(AprError) as info:
        read_sharded(manifest)
    assert info.value.code is ErrorCode.ARGUMENT


def _sharded(tmp_path):
    result = write_sharded(tmp_path / "m.apr", model_tensors(), META, max_shard_size=20000)
    return result.files


def test_missing_shard_is_e007_naming_it(tmp_path):
    files = _sharded(tmp_path)
    os.unlink(files[1])
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr")
    assert info.value.code is ErrorCode.IO
    assert info.value.context["shard"] == os.path.basename(files[1])
    assert os.path.basename(files[1]) in str(info.value)
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr", opener=lambda name: open(name + ".nope"))
    assert info.value.code is ErrorCode.IO


def test_altered_shard_is_e004_naming_it(tmp_path):
    files = _sharded(tmp_path)
    blob = bytearray(open(files[2], "rb").read())
    blob[len(blob) // 2] ^= 0x01
    open(files[2], "wb").write(bytes(blob))
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr")
    assert info.value.code is ErrorCode.CHECKSUM
    assert os.path.basename(files[2]) in str(info.value)


def test_resized_shard_is_e002(tmp_path):
    files = _sharded(tmp_path)
    with open(files[0], "ab") as handle:
        handle.write(b"extra")
    for verify in (True, False):
        with pytest.raises(AprError) as info:
            read_sharded(tmp_path / "m.apr", verify=verify)
        assert info.value.code is ErrorCode.CORRUPT
        assert info.value.context["shard"] == os.path.basename(files[0])


def _rewrite_manifest(tmp_path, change):
    manifest = read_apr2(tmp_path / "m.apr")
    meta = dict(manifest.metadata)
    manifest.close()
    change(meta)
    write_apr2(tmp_path / "m.apr", [], meta, flags=F.SHARDED)


def test_map_disagreeing_with_shards_is_e002(tmp_path):
    _sharded(tmp_path)

    def move(meta):
        meta["tensor_shard_map"] = dict(meta["tensor_shard_map"], tok_embd=1)
    _rewrite_manifest(tmp_path, move)
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr")
    assert info.value.code is ErrorCode.CORRUPT and "tensor_shard_map" in str(info.value)


@pytest.mark.parametrize("change", [
    lambda m: m["shards"][0].update(file="../escape.apr"),
    lambda m: m["shards"][0].update(crc32="xyz"),
    lambda m: m.update(shard_count=99),
    lambda m: m.update(sharded="yes"),
    lambda m: m["tensor_shard_map"].update(norm=7),
    lambda m: m.pop("shards"),
])
def test_malformed_manifest_is_e002(tmp_path, change):
    _sharded(tmp_path)
    _rewrite_manifest(tmp_path, change)
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr")
    assert info.value.code is ErrorCode.CORRUPT


def test_manifest_crc_must_match_shard_footer(tmp_path):
    files = _sharded(tmp_path)
    _rewrite_manifest(tmp_path, lambda m: m["shards"][1].update(crc32="00000000"))
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr", verify=False)
    assert info.value.code is ErrorCode.CHECKSUM
    assert info.value.context["shard"] == os.path.basename(files[1])


def test_plain_file_is_not_a_manifest(tmp_path):
    write_apr2(tmp_path / "plain.apr", [], {})
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "plain.apr")
    assert info.value.code is ErrorCode.FORMAT


def test_partial_failure_leaves_no_files(tmp_path):
    tensors = model_tensors()

    def fail():
        raise RuntimeError("read error in the source model")
    tensors[4] = LazyTensor(tensors[4].name, tensors[4].dtype, tensors[4].shape, fail)
    with pytest.raises(RuntimeError):
        write_sharded(tmp_path / "m.apr", tensors, META, max_shard_size=20000)
    assert os.listdir(tmp_path) == []
    with pytest.raises(AprError):  # bad metadata is refused before any shard is written
        write_sharded(tmp_path / "m.apr", model_tensors(), {"bad": float("nan")},
                      max_shard_size=20000)
    assert os.listdir(tmp_path) == []


def test_manifest_failure_removes_written_shards(tmp_path, monkeypatch):
    real_write, shards_written = shards.write_apr2, []

    def write_or_fail(path, tensors, metadata, *args, **kwargs):
        if kwargs.get("flags", 0) & F.SHARDED:
            assert len(shards_written) >= 3 and all(map(os.path.exists, shards_written))
            raise AprError(ErrorCode.IO, "disk full", path=str(path))
        shards_written.append(path)
        return real_write(path, tensors, metadata, *args, **kwargs)
    monkeypatch.setattr(shards, "write_apr2", write_or_fail)
    with pytest.raises(AprError) as info:
        write_sharded(tmp_path / "m.apr", model_tensors(), META, max_shard_size=20000)
    assert info.value.code is ErrorCode.IO
    assert os.listdir(tmp_path) == []


def test_overwrite_false_refuses_existing_shards(tmp_path):
    _sharded(tmp_path)
    before = sorted(os.listdir(tmp_path))
    (tmp_path / "m.apr").unlink()
    with pytest.raises(AprError) as info:
        write_sharded(tmp_path / "m.apr", model_tensors(), META, max_shard_size=20000,
                      overwrite=False)
    assert info.value.code is ErrorCode.ARGUMENT
    assert sorted(os.listdir(tmp_path)) == [n for n in before if n != "m.apr"]
