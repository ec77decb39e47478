"""APR v2 round trips, layout guarantees, integrity checks, streaming and writer failures."""
from __future__ import annotations

import asyncio
import errno
import os
import random
import struct
import zlib

import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats import flags as F
from apr_core.formats.apr2 import read_apr2, write_apr2, write_apr2_bytes
from apr_core.formats.apr2_layout import (FOOTER_MAGIC, HEADER_SIZE, MAGIC, Footer, Header,
                                          align_up, pack_entry, pack_index)
from apr_core.formats.apr2_stream import StreamingLoader
from apr_core.io import AsyncRangeReader, BytesSource, CountingSource, FileSource, run_async
from apr_core.tensor import LazyTensor, RawTensor

F32, F16, U8 = dtypes.BY_NAME["F32"], dtypes.BY_NAME["F16"], dtypes.BY_NAME["U8"]
APR_DTYPES = [d for d in dtypes.ALL if d.apr_id is not None]


def rand_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).getrandbits(8 * n).to_bytes(n, "little") if n else b""


def raw(name, dtype, shape, seed=0, data=None):
    size = dtype.nbytes(tuple(shape))
    return RawTensor(name, dtype, tuple(shape), rand_bytes(size, seed) if data is None else data)


def refooter(body_and_footer: bytes) -> bytes:
    """Recompute the footer after patching bytes (so only the patched defect remains)."""
    body = body_and_footer[:-16]
    return body + Footer(zlib.crc32(body), FOOTER_MAGIC, len(body) + 16).pack()


def roundtrip(tensors, **kwargs):
    data = write_apr2_bytes(tensors, {"model_type": "test"}, **kwargs)
    model = read_apr2(data)
    for tensor in tensors:
        got = model.read_raw(tensor.name)
        assert (got.dtype, got.shape, got.data) == (tensor.dtype, tensor.shape, tensor.data)
    return data, model


def test_every_apr_dtype_round_trips_with_its_id():
    tensors = [raw("t.{}".format(d.name), d, (3, d.block_size * 2), seed=i)
               for i, d in enumerate(APR_DTYPES)]
    data, model = roundtrip(tensors)
    assert list(model.tensors) == sorted(t.name for t in tensors)
    assert {e.name: e.dtype_id for e in model.entries} == {
        "t." + d.name: d.apr_id for d in APR_DTYPES}
    assert model.flags & F.QUANTIZED and model.flags & F.ALIGNED_64
    assert not model.flags & F.COMPRESSED
    assert model.warnings == []


def test_plain_dtypes_do_not_set_quantized():
    _, model = roundtrip([raw("a", F32, (2, 2))])
    assert not model.flags & F.QUANTIZED


def test_scalar_and_eight_dims():
    tensors = [raw("scalar", F32, ()), raw("eight", F16, (1, 2, 1, 2, 1, 2, 1, 3)),
               raw("zero", F32, (0, 4))]
    _, model = roundtrip(tensors)
    assert model.info("scalar").shape == () and model.info("scalar").size == 4
    assert model.info("zero").size == 0


def test_empty_model():
    data = write_apr2_bytes([], {})
    model = read_apr2(data)
    assert model.tensors == {} and model.metadata == {"apr_version": "2.0.0"}
    assert model.warnings == []
    assert len(data) == align_up(HEADER_SIZE + len(b'{"apr_version": "2.0.0"}') + 8, 64) + 16


@pytest.mark.parametrize("alignment,flag", [(64, F.ALIGNED_64), (32, F.ALIGNED_32)])
def test_alignment(alignment, flag):
    tensors = [raw("t{:02d}".format(i), U8, (i * 7 + 1,), seed=i) for i in range(12)]
    data, model = roundtrip(tensors, alignment=alignment)
    assert model.flags & (F.ALIGNED_64 | F.ALIGNED_32) == flag
    assert model.data_offset % alignment == 0
    offsets = [info.offset for info in model.tensors.values()]
    assert all(offset % alignment == 0 for offset in offsets)
    assert offsets == sorted(offsets)
    # Payloads are packed: each gap is less than one alignment unit.
    ends = [info.offset + info.size for info in model.tensors.values()]
    assert all(0 <= nxt - end < alignment for end, nxt in zip(ends, offsets[1:]))


def test_bad_alignment_argument():
    with pytest.raises(AprError) as info:
        write_apr2_bytes([], {}, alignment=16)
    assert info.value.code is ErrorCode.ARGUMENT


@pytest.mark.parametrize("compression,codec", [("lz4", 1), ("zstd", 2), ("zstd:19", 2)])
def test_compression(compression, codec):
    pattern = struct.pack("<64f", *range(64)) * 1000            # 256000 bytes: 4 blocks
    noise = rand_bytes(200 * 1024, 7)                            # incompressible
    tensors = [RawTensor("compressible", F32, (1000, 64), pattern),
               RawTensor("noise", U8, (len(noise),), noise), raw("small", F32, (3,))]
    data, model = roundtrip(tensors, compression=compression)
    packed = model.info("compressible")
    assert packed.flags == codec and packed.raw_size == len(pattern)
    assert packed.size < len(pattern) // 4
    stored = model.info("noise")
    assert (stored.flags, stored.raw_size, stored.size) == (0, 0, len(noise))
    assert model.flags & F.COMPRESSED
    assert len(data) < len(pattern)


def test_compression_that_never_helps_leaves_flag_clear():
    _, model = roundtrip([raw("noise", U8, (5000,), seed=3)], compression="lz4")
    assert not model.flags & F.COMPRESSED and model.info("noise").flags == 0


def test_unknown_compression_name():
    with pytest.raises(AprError) as info:
        write_apr2_bytes([raw("a", F32, (1,))], {}, compression="brotli")
    assert info.value.code is ErrorCode.UNSUPPORTED


def _dtype_byte_offset(data: bytes, name: bytes) -> int:
    # The dtype byte follows the entry's u16 length and name inside the index.
    return data.index(struct.pack("<H", len(name)) + name) + 2 + len(name)


@pytest.mark.parametrize("alias,target", [(10, "Q8_0"), (11, "Q4_0")])
def test_read_aliases(alias, target):
    dtype = dtypes.BY_NAME[target]
    tensor = raw("w", dtype, (2, 64))
    data = bytearray(write_apr2_bytes([tensor], {}))
    pos = _dtype_byte_offset(bytes(data), b"w")
    assert data[pos] == dtype.apr_id
    data[pos] = alias
    model = read_apr2(refooter(bytes(data)))
    assert model.info("w").dtype is dtype and model.entries[0].dtype_id == alias
    assert model.read_raw("w").data == tensor.data


def test_metadata_unicode_and_surrogates():
    meta = {"name": "модель 🤖 ü", "lone": "\udcff\ud800x", "apr_version": "2.0.0",
            "nested": {"a": [1, 2.5, None, True]}}
    data = write_apr2_bytes([], meta)
    model = read_apr2(data)
    assert model.metadata == meta
    data[HEADER_SIZE:HEADER_SIZE + model.header.metadata_size].decode("ascii")  # ensure_ascii


def test_metadata_must_be_serialisable():
    for bad in ({"x": float("nan")}, {"x": object()}, ["not", "a", "dict"]):
        with pytest.raises(AprError) as info:
            write_apr2_bytes([], bad)
        assert info.value.code is ErrorCode.ARGUMENT


def test_deterministic_and_file_matches_bytes(tmp_path):
    tensors = [raw("b", F32, (4, 4), 1), raw("a", U8, (9,), 2)]
    first = write_apr2_bytes(tensors, {"k": "v"}, compression="zstd")
    assert first == write_apr2_bytes(list(reversed(tensors)), {"k": "v"}, compression="zstd")
    result = write_apr2(tmp_path / "m.apr", tensors, {"k": "v"}, compression="zstd",
                        sha256=True)
    assert (tmp_path / "m.apr").read_bytes() == first
    assert result.size == len(first)
    assert result.crc32 == struct.unpack_from("<I", first, len(first) - 16)[0]


@pytest.mark.parametrize("bad,code", [
    ([raw("a", F32, (1,)), raw("a", F32, (1,))], ErrorCode.ARGUMENT),
    ([RawTensor("a", F32, (2,), b"\0" * 7)], ErrorCode.ARGUMENT),
    ([raw("\udcff", F32, (1,))], ErrorCode.ARGUMENT),
    ([raw("", F32, (1,))], ErrorCode.ARGUMENT),
    ([RawTensor("x" * 65536, F32, (1,), b"\0" * 4)], ErrorCode.ARGUMENT),
    ([RawTensor("q", dtypes.BY_NAME["Q8_1"], (32,), b"\0" * 40)], ErrorCode.UNSUPPORTED),
    ([RawTensor("n", F32, (1,) * 9, b"\0" * 4)], ErrorCode.FORMAT),
    ([RawTensor("q", dtypes.BY_NAME["Q8_0"], (33,), b"")], ErrorCode.FORMAT),
])
def test_writer_validation(bad, code):
    with pytest.raises(AprError) as info:
        write_apr2_bytes(bad, {})
    assert info.value.code is code


def test_every_bit_flip_is_detected():
    pattern = bytes(range(16)) * 40
    tensors = [raw("a.weight", F32, (16, 8), 1), RawTensor("b.packed", U8, (640,), pattern),
               raw("c", dtypes.BY_NAME["Q4_0"], (8, 32), 2)]
    data = write_apr2_bytes(tensors, {"model_type": "tiny"}, compression="lz4")
    model = read_apr2(data)
    assert model.info("b.packed").flags == 1  # the flip test covers a compressed payload
    assert 900 <= len(data) <= 2048
    for bit in range(len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(AprError):
            flipped = read_apr2(bytes(damaged))
            for name in flipped.tensors:
                flipped.read_raw(name)


def _sparse_model(path, size=50 * 2 ** 30):
    """A valid header/metadata/index/footer whose tensors sit tens of GB into the file."""
    meta = b'{"apr_version": "2.0.0", "model_type": "huge"}'
    entries, rel = [], 40 * 2 ** 30
    for i in range(3):
        entries.append(pack_entry("layer.{}".format(i).encode(), 0, (1024, 1024 * 256),
                                  rel, 2 ** 30, 0, 0))
        rel += 2 ** 30
    index = pack_index(entries)
    data_offset = align_up(HEADER_SIZE + len(meta) + len(index), 64)
    header = Header(MAGIC, 2, 0, F.ALIGNED_64, HEADER_SIZE, len(meta), HEADER_SIZE + len(meta),
                    len(index), data_offset)
    with open(path, "wb") as handle:
        handle.write(header.pack() + meta + index)
        handle.truncate(size)
        handle.seek(size - 16)
        handle.write(Footer(0, FOOTER_MAGIC, size).pack())


def test_inspect_reads_only_header_and_index_of_50gb_sparse_file(tmp_path):
    path = tmp_path / "huge.apr"
    _sparse_model(path)
    source = CountingSource(FileSource(path))
    model = read_apr2(source, verify=False)
    assert model.metadata["model_type"] == "huge" and len(model.tensors) == 3
    assert model.info("layer.2").offset + 2 ** 30 <= 50 * 2 ** 30
    assert source.bytes_read < 2 ** 20
    loader = StreamingLoader(CountingSource(FileSource(path)))
    assert [t.name for t in loader.load_index()] == ["layer.0", "layer.1", "layer.2"]
    assert loader.source.bytes_read < 2 ** 20
    model.close()
    loader.close()


def _streaming_model():
    tensors = [raw("a.big", U8, (300000,), 1), raw("b", F32, (8, 8), 2),
               RawTensor("c", F32, (4096,), b"\0" * 16384)]
    return tensors, write_apr2_bytes(tensors, {"model_type": "s"}, compression="zstd")


def test_streaming_loader_reads_only_what_it_needs():
    tensors, data = _streaming_model()
    source = CountingSource(BytesSource(data))
    loader = StreamingLoader(source, cache_budget=100000)
    assert loader.load_metadata()["model_type"] == "s"
    index = {info.name: info for info in loader.load_index()}
    assert list(index) == ["a.big", "b", "c"]
    before = len(source.ranges)
    assert loader.load_tensor("b").data == tensors[1].data
    assert source.ranges[before:] == [(index["b"].offset, index["b"].size)]
    assert loader.prefetch(["c", "a.big", "b"]) == ["c", "b"]  # a.big is over budget
    assert loader.cached_bytes == index["c"].size + index["b"].size
    before = len(source.ranges)
    assert loader.load_tensor("c").data == tensors[2].data
    assert loader.load_tensor("a.big").data == tensors[0].data
    assert source.ranges[before:] == [(index["a.big"].offset, index["a.big"].size)]
    assert loader.cached_bytes == index["b"].size
    loader.verify()
    with pytest.raises(AprError) as info:
        loader.load_tensor("missing")
    assert info.value.code is ErrorCode.NOT_FOUND
    damaged = bytearray(data)
    damaged[index["b"].offset] ^= 0x10
    with pytest.raises(AprError) as info:
        StreamingLoader(bytes(damaged)).verify()
    assert info.value.code is ErrorCode.CHECKSUM


class FakeRangeReader(AsyncRangeReader):
    """An asynchronous transport over bytes that logs every request (like fetch)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.size = len(data)
        self.requests = []

    async def read(self, offset: int, length: int) -> bytes:
        await asyncio.sleep(0)
        self.requests.append((offset, length))
        return self._data[offset:offset + length]


def test_streaming_loader_over_async_transport():
    tensors, data = _streaming_model()
    reader = FakeRangeReader(data)
    tensor = asyncio.run(run_async(reader, lambda src: StreamingLoader(src).load_tensor("b"),
                                   min_fetch=64))
    assert tensor.data == tensors[1].data
    fetched = sum(length for _, length in reader.requests)
    assert fetched < 64 * 1024 < len(data)  # never fetched the 300 KB tensor
    index = asyncio.run(run_async(FakeRangeReader(data),
                                  lambda src: StreamingLoader(src).load_index()))
    assert [info.name for info in index] == ["a.big", "b", "c"]
    asyncio.run(run_async(FakeRangeReader(data), lambda src: StreamingLoader(src).verify()))
    damaged = bytearray(data)
    damaged[-100] ^= 1
    with pytest.raises(AprError) as info:
        asyncio.run(run_async(FakeRangeReader(bytes(damaged)),
                              lambda src: StreamingLoader(src).verify()))
    assert info.value.code is ErrorCode.CHECKSUM


def test_read_apr2_over_async_transport():
    tensors, data = _streaming_model()
    model_data = asyncio.run(run_async(
        FakeRangeReader(data), lambda src: read_apr2(src).read_raw("a.big").data))
    assert model_data == tensors[0].data


def test_load_failure_midway_leaves_no_file(tmp_path):
    def explode():
        raise RuntimeError("source vanished")
    tensors = [raw("a", F32, (100,)), LazyTensor("b", F32, (4,), explode), raw("c", U8, (3,))]
    with pytest.raises(RuntimeError):
        write_apr2(tmp_path / "m.apr", tensors, {})
    assert os.listdir(tmp_path) == []


def test_existing_file_kept_when_write_fails(tmp_path):
    target = tmp_path / "m.apr"
    target.write_bytes(b"old")
    with pytest.raises(AprError):
        write_apr2(target, [RawTensor("a", F32, (2,), b"short")], {})
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["m.apr"]
    with pytest.raises(AprError) as info:
        write_apr2(target, [], {}, overwrite=False)
    assert info.value.code is ErrorCode.ARGUMENT


def _write_as_nobody(directory):
    """write_apr2 into `directory` in a forked child that dropped root for `nobody`; the
    child's exit status is 0 for E-IO with nothing written, 1 for a write that worked,
    2 for any other outcome."""
    pid = os.fork()
    if pid == 0:                                        # the child: never returns
        status = 2
        try:
            os.setgid(65534)
            os.setuid(65534)
            write_apr2(os.path.join(directory, "m.apr"), [raw("a", F32, (2,))], {})
            status = 1
        except AprError as err:
            status = 0 if err.code is ErrorCode.IO else 2
        finally:
            os._exit(status)
    return os.waitpid(pid, 0)[1] >> 8


def test_read_only_directory(tmp_path):
    """An unwritable directory gives E-IO and leaves nothing behind. Root ignores directory
    permissions, so as root the write runs in a child that dropped to `nobody`."""
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            for folder in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
                folder.chmod(folder.stat().st_mode | 0o005)   # let nobody reach it
            assert _write_as_nobody(str(locked)) == 0
        else:
            with pytest.raises(AprError) as info:
                write_apr2(locked / "m.apr", [raw("a", F32, (2,))], {})
            assert info.value.code is ErrorCode.IO
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o755)


class _FullDisk:
    """Wraps the temp file handle; writes fail with ENOSPC once `budget` bytes are used."""

    def __init__(self, handle, budget):
        self._handle, self._budget = handle, budget

    def write(self, data):
        self._budget -= len(data)
        if self._budget < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


@pytest.mark.parametrize("budget", [0, 100, 5000])
def test_disk_full_is_io_error_and_leaves_no_file(tmp_path, monkeypatch, budget):
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(real_fdopen(fd, *a, **k),
                                                                    budget))
    with pytest.raises(AprError) as info:
        write_apr2(tmp_path / "m.apr", [raw("a", F32, (4000,))], {})
    assert info.value.code is ErrorCode.IO and "disk full" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_header_flags_argument():
    model = read_apr2(write_apr2_bytes([], {}, flags=F.GGUF_SRC | F.STREAMING))
    assert model.flags & F.GGUF_SRC and model.flags & F.STREAMING
    for forbidden in (F.SIGNED, F.ENCRYPTED, 1 << 20):
        with pytest.raises(AprError) as info:
            write_apr2_bytes([], {}, flags=forbidden)
        assert info.value.code is ErrorCode.ARGUMENT


def test_signed_flag_moves_end_of_data():
    # A SIGNED file reserves 96 bytes before the footer: a payload may not reach into it.
    tensor = raw("a", U8, (64,))
    data = write_apr2_bytes([tensor], {})
    header = Header(*struct.unpack_from("<4sHHIIIIII", data, 0))
    signed = header._replace(flags=header.flags | F.SIGNED).pack() + data[HEADER_SIZE:-16]
    model = read_apr2(refooter(signed + b"\x01" * 96 + b"\0" * 16))
    assert model.signature_range == (len(data) - 16, 96)
    assert model.read_raw("a").data == tensor.data
    with pytest.raises(AprError) as info:  # without the block the payload overlaps it
        read_apr2(refooter(signed + b"\0" * 16))
    assert info.value.code is ErrorCode.CORRUPT


def test_encrypted_payloads_need_a_key():
    data = write_apr2_bytes([raw("a", U8, (8,))], {})
    header = Header(*struct.unpack_from("<4sHHIIIIII", data, 0))
    model = read_apr2(refooter(header._replace(flags=header.flags | F.ENCRYPTED).pack()
                               + data[HEADER_SIZE:]))
    with pytest.raises(AprError) as info:
        model.read_raw("a")
    assert info.value.code is ErrorCode.UNSUPPORTED
    model.payload_filter = lambda info, stored: bytes(b ^ 0 for b in stored)
    assert len(model.read_raw("a").data) == 8
