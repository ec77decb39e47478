"""One hand-made bad (or edge-case) file per seed 000 §11 A items 1-22, each with its code.

Files are assembled field by field from `apr2_layout`, and the footer CRC is recomputed
after each edit unless the item is about the CRC or footer, so exactly one defect remains.
"""
from __future__ import annotations

import json
import struct
import zlib

import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats import flags as F
from apr_core.formats.apr2 import read_apr2, write_apr2_bytes
from apr_core.formats.apr2_layout import (FOOTER_MAGIC, HEADER_SIZE, MAGIC, Footer, Header,
                                          pack_entry)
from apr_core.formats.shards import read_sharded, write_sharded
from apr_core.io import ByteSource
from apr_core.tensor import RawTensor
from apr2_builders import assemble, f32_entry, good_file, refooter

F32 = dtypes.BY_NAME["F32"]
def code_of(data, **kwargs) -> ErrorCode:
    with pytest.raises(AprError) as info:
        model = read_apr2(data, **kwargs)
        for name in model.tensors:
            model.read_raw(name)
    return info.value.code


def test_good_file_is_good():
    model = read_apr2(good_file())
    assert model.warnings == [] and list(model.tensors) == ["a", "b"]


# 1 magic
@pytest.mark.parametrize("magic", [b"APR1", b"\x00\x01\x02\x03", b"2RPA"])
def test_01_bad_magic(magic):
    assert code_of(refooter(magic + good_file()[4:])) is ErrorCode.FORMAT


def test_01_tiny_inputs():
    assert code_of(b"") is ErrorCode.FORMAT
    assert code_of(b"AP") is ErrorCode.FORMAT
    assert code_of(MAGIC + b"\0" * 20) is ErrorCode.CORRUPT


# 2 inserted byte before the data offset
def test_02_inserted_byte():
    data = good_file()
    data_offset = struct.unpack_from("<I", data, 28)[0]
    damaged = data[:data_offset - 1] + b"\0" + data[data_offset - 1:]
    assert code_of(damaged) is ErrorCode.CORRUPT
    # Even with the footer's size field fixed up, the stale CRC catches the insertion.
    stale_crc = struct.unpack_from("<I", data, len(data) - 16)[0]
    body = damaged[:-16]
    assert code_of(body + Footer(stale_crc, FOOTER_MAGIC, len(body) + 16).pack()) \
        is ErrorCode.CHECKSUM


# 3 version
def test_03_version_3_is_e003():
    data = assemble([], version=(3, 0))
    assert code_of(data) is ErrorCode.VERSION
    newer_minor = read_apr2(assemble([], version=(2, 7)))
    assert any("minor" in w for w in newer_minor.warnings)


# 4 checksum
def test_04_flipped_payload_bit():
    data = bytearray(good_file())
    data[-20] ^= 0x04
    assert code_of(bytes(data)) is ErrorCode.CHECKSUM
    # verify=False skips the CRC: the flipped value is then simply returned.
    assert read_apr2(bytes(data), verify=False).read_raw("b").data != good_file()[-32:-16]


# 5 JSON metadata
@pytest.mark.parametrize("meta", [b'{"apr_version": "2.0.0"]', b'{"a": \xff}', b"[1, 2]",
                                  b'"text"', b"[" * 100000])
def test_05_corrupt_json(meta):
    assert code_of(assemble([], meta=meta)) is ErrorCode.FORMAT


# 6 alignment
def test_06_one_byte_alignment_warns():
    entries = [f32_entry(b"a", shape=(1,)), f32_entry(b"b", offset=4, shape=(3,))]
    data = assemble(entries, struct.pack("<4f", 1, 2, 3, 4), flags=0, align=1)
    model = read_apr2(data)
    assert model.read_raw("b").data == struct.pack("<3f", 2, 3, 4)
    assert any("aligned" in w for w in model.warnings)


# 7 index order
def test_07_swapped_index_entries():
    data = assemble([f32_entry(b"b", offset=64), f32_entry(b"a")], b"\0" * 80)
    assert code_of(data) is ErrorCode.CORRUPT


# 8 compression codec
def test_08_unknown_codec():
    data = assemble([f32_entry(b"a", flags=7, size=10, raw_size=16)], b"\0" * 10)
    assert code_of(data) is ErrorCode.UNSUPPORTED


# 9 sharding
def test_09_deleted_shard(tmp_path):
    tensors = [RawTensor(n, F32, (256,), bytes(1024)) for n in ("x", "y", "z")]
    result = write_sharded(tmp_path / "m.apr", tensors, {}, max_shard_size=1500)
    (tmp_path / "m-00002-of-00003.apr").unlink()
    with pytest.raises(AprError) as info:
        read_sharded(tmp_path / "m.apr")
    assert info.value.code is ErrorCode.IO and len(result.files) == 3
    assert "m-00002-of-00003.apr" in str(info.value)


# 10 endianness
def test_10_little_endian_contract():
    values = (1.0, 2.0, -3.5, 0.25)
    model = read_apr2(good_file())
    payload = model.read_raw("a").data
    assert struct.unpack("<4f", payload) == values
    assert struct.unpack(">4f", payload) != values  # a big-endian reader would get garbage
    header = good_file()[:HEADER_SIZE]
    assert struct.unpack_from(">H", header, 4)[0] == 512  # BE major would be "512": E003
    assert struct.unpack_from("<H", header, 4)[0] == 2


# 11 flags
def test_11_undefined_flag_bit_warns_only():
    model = read_apr2(assemble([], flags=F.ALIGNED_64 | 1 << 20))
    assert any("unknown header flag" in w for w in model.warnings)
    tensor_bits = assemble([f32_entry(b"a", flags=1 << 9)], b"\0" * 16)
    assert any("per-tensor" in w for w in read_apr2(tensor_bits).warnings)


# 12 footer magic
@pytest.mark.parametrize("cut", [16, 1, 8])
def test_12_truncated_footer(cut):
    assert code_of(good_file()[:-cut]) is ErrorCode.CORRUPT
    assert code_of(good_file()[:-cut], verify=False) is ErrorCode.CORRUPT


# 13 file size
@pytest.mark.parametrize("garbage", [b"x", b"garbage!" * 3, b"\0" * 5000])
def test_13_appended_garbage(garbage):
    with pytest.raises(AprError) as info:
        read_apr2(good_file() + garbage)
    assert info.value.code is ErrorCode.CORRUPT
    assert "appended" in info.value.message
    assert "{} unexpected byte".format(len(garbage)) in info.value.message


def test_13_footer_size_field_wrong():
    data = good_file()
    body = data[:-16]
    bad = body + Footer(zlib.crc32(body), FOOTER_MAGIC, len(data) + 1).pack()
    assert code_of(bad) is ErrorCode.CORRUPT


# 14 tensor offsets
@pytest.mark.parametrize("offset", [10 ** 9, 2 ** 64 - 1, 60])
def test_14_offset_beyond_eof(offset):
    data = assemble([f32_entry(b"a", offset=offset)], b"\0" * 16)
    assert code_of(data) is ErrorCode.CORRUPT


def test_14_overlapping_payloads():
    data = assemble([f32_entry(b"a", shape=(8,)), f32_entry(b"b", offset=16)], b"\0" * 64)
    assert code_of(data) is ErrorCode.CORRUPT


# 15 empty model
def test_15_empty_model_passes():
    model = read_apr2(assemble([]))
    assert model.tensors == {} and model.warnings == []


# 16 huge metadata
class ClaimsHugeMetadata(ByteSource):
    """A 300 MB 'file' whose header claims 200 MB of metadata; it holds no such bytes."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        meta_size = 200 * 2 ** 20
        self._size = 300 * 2 ** 20
        self._header = Header(MAGIC, 2, 0, F.ALIGNED_64, 32, meta_size, 32 + meta_size, 8,
                              32 + meta_size + 64).pack()
        self._footer = Footer(0, FOOTER_MAGIC, self._size).pack()

    @property
    def size(self):
        return self._size

    def _read(self, offset, length):
        self.largest = max(self.largest, length)
        assert length < 2 ** 20, "reader tried to pull the huge metadata in"
        out = bytearray(length)
        for start, blob in ((0, self._header), (self._size - 16, self._footer)):
            lo, hi = max(offset, start), min(offset + length, start + len(blob))
            if lo < hi:
                out[lo - offset:hi - offset] = blob[lo - start:hi - start]
        return bytes(out)


def test_16_huge_metadata_is_e008_without_allocating():
    source = ClaimsHugeMetadata()
    with pytest.raises(AprError) as info:
        read_apr2(source, verify=False)
    assert info.value.code is ErrorCode.MEMORY and source.largest <= 32
    huge = json.dumps({"blob": "x" * 2000}).encode()
    assert code_of(assemble([], meta=huge), max_metadata=1000) is ErrorCode.MEMORY


# 17 UTF-8 names
def test_17_invalid_utf8_name():
    assert code_of(assemble([f32_entry(b"a\xff")], b"\0" * 16)) is ErrorCode.CORRUPT
    assert code_of(assemble([f32_entry(b"\xed\xa0\x80")], b"\0" * 16)) is ErrorCode.CORRUPT


# 18 duplicate names
def test_18_duplicate_names():
    data = assemble([f32_entry(b"tensor.a"), f32_entry(b"tensor.a", offset=64)], b"\0" * 80)
    assert code_of(data) is ErrorCode.CORRUPT


# 19 dimension limit
def test_19_nine_dims():
    data = assemble([f32_entry(b"a", shape=(1,) * 9)], b"\0" * 4)
    assert code_of(data) is ErrorCode.CORRUPT
    eight = read_apr2(assemble([f32_entry(b"a", shape=(1,) * 8)], b"\0" * 4))
    assert eight.info("a").shape == (1,) * 8


# 20 zero dims
def test_20_scalar_passes():
    model = read_apr2(assemble([f32_entry(b"s", shape=())], struct.pack("<f", 7.5)))
    assert model.info("s").shape == () and model.read_raw("s").data == struct.pack("<f", 7.5)


# 21 datatypes
@pytest.mark.parametrize("dtype_id", [255, 15, 21, 99])
def test_21_unknown_dtype(dtype_id):
    data = assemble([f32_entry(b"a", dtype_id=dtype_id)], b"\0" * 16)
    assert code_of(data) is ErrorCode.FORMAT


# 22 padding bytes
def test_22_nonzero_padding_warns():
    values = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    before_data = read_apr2(assemble([f32_entry(b"a")], values, pad_byte=b"\xff"))
    assert any("padding" in w for w in before_data.warnings)
    between = assemble([f32_entry(b"a"), f32_entry(b"b", offset=64)],
                       values + b"\xff" * 48 + values)
    assert not any("padding" in w for w in read_apr2(between, verify=False).warnings)
    model = read_apr2(between)  # the verifying pass reads the gaps
    assert any("padding bytes are not zero in 1 gap" in w for w in model.warnings)
    assert model.read_raw("b").data == values


# Further structural defects, each with its code.
def test_count_larger_than_index():
    assert code_of(assemble([f32_entry(b"a")], b"\0" * 16, count=10 ** 6)) is ErrorCode.CORRUPT
    assert code_of(assemble([f32_entry(b"a")], b"\0" * 16, count=0)) is ErrorCode.CORRUPT


@pytest.mark.parametrize("entry", [
    f32_entry(b"a", size=12),                            # raw size disagrees with the shape
    f32_entry(b"a", raw_size=16),                        # raw tensor with a raw_size
    f32_entry(b"a", flags=1, size=8, raw_size=12),       # compressed raw_size disagrees
    pack_entry(b"", 0, (4,), 0, 16, 0, 0),               # empty name
])
def test_inconsistent_entries(entry):
    assert code_of(assemble([entry], b"\0" * 16)) is ErrorCode.CORRUPT


def test_header_offsets_out_of_order():
    data = good_file()
    header = Header(*struct.unpack_from("<4sHHIIIIII", data, 0))
    for change in (dict(metadata_offset=33), dict(index_offset=header.index_offset + 1),
                   dict(data_offset=header.index_offset), dict(data_offset=len(data)),
                   dict(index_size=header.index_size + 4)):
        patched = header._replace(**change).pack() + data[HEADER_SIZE:]
        assert code_of(refooter(patched)) is ErrorCode.CORRUPT, change


def test_corrupt_compressed_stream():
    tensor = RawTensor("z", F32, (4096,), bytes(16384))
    data = bytearray(write_apr2_bytes([tensor], {}, compression="lz4"))
    model = read_apr2(bytes(data))
    offset = model.info("z").offset
    data[offset:offset + 4] = struct.pack("<I", 0x7FFFFFFF)  # first block claims 2 GB
    assert code_of(refooter(bytes(data))) is ErrorCode.CORRUPT
