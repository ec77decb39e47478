"""Hypothesis fuzzing of the APR v2 reader (runs in well under 30 s).

Random bytes and mutations of valid files (plain, compressed, 32-byte aligned, sharded
manifest) may only ever raise AprError, through parsing, reading every tensor and
streaming. Mutations are tried both with the CRC left stale (the checksum must catch
them) and with the footer recomputed (the structural checks must), and with verify off.
"""
from __future__ import annotations

import struct
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core import dtypes
from apr_core.errors import AprError
from apr_core.formats import flags as F
from apr_core.formats.apr2 import read_apr2, write_apr2_bytes
from apr_core.formats.apr2_layout import FOOTER_MAGIC, MAGIC, Footer
from apr_core.formats.apr2_stream import StreamingLoader
from apr_core.tensor import RawTensor

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _seeds():
    by = dtypes.BY_NAME
    tensors = [RawTensor("w", by["F32"], (2, 3), bytes(range(24))),
               RawTensor("q", by["Q8_0"], (1, 32), bytes(range(34))),
               RawTensor("s", by["F16"], (), b"\x00\x3c"),
               RawTensor("z", by["U8"], (300,), bytes(300))]
    meta = {"model_type": "fuzz", "vocab": ["a", "é"], "n": 3}
    return [write_apr2_bytes(tensors, meta),
            write_apr2_bytes(tensors, meta, compression="lz4"),
            write_apr2_bytes(tensors, meta, compression="zstd", alignment=32),
            write_apr2_bytes([], {"sharded": True, "shards": []}, flags=F.SHARDED)]


SEEDS = _seeds()
_INTERESTING = [0, 1, 2, 7, 8, 9, 16, 31, 32, 33, 64, 255, 256, 2 ** 16 - 1, 2 ** 31,
                2 ** 32 - 1, 2 ** 63, 2 ** 64 - 1] + [len(s) for s in SEEDS]


def refooter(data: bytes) -> bytes:
    body = data[:-16]
    return body + Footer(zlib.crc32(body), FOOTER_MAGIC, len(body) + 16).pack()


def _exercise(data: bytes) -> None:
    for verify in (True, False):
        try:
            model = read_apr2(data, verify=verify)
            for name in model.tensors:
                model.read_raw(name)
        except AprError:
            pass
    try:
        loader = StreamingLoader(data)
        names = [info.name for info in loader.load_index()]
        loader.prefetch(names[::2])
        for name in names:
            loader.load_tensor(name)
    except AprError:
        pass


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data):
    _exercise(data)
    _exercise(MAGIC + b"\x02\x00\x00\x00" + data)


mutation = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 4096), st.integers(0, 255)),
    st.tuples(st.just("flip"), st.integers(0, 4096 * 8)),
    st.tuples(st.just("int"), st.integers(0, 4096), st.sampled_from(["<H", "<I", "<Q"]),
              st.sampled_from(_INTERESTING)),
    st.tuples(st.just("cut"), st.integers(0, 4096)),
    st.tuples(st.just("insert"), st.integers(0, 4096), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 4096), st.integers(1, 16)),
)


def _mutate(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op in ops:
        if not buf:
            break
        pos = op[1] % len(buf)
        if op[0] == "set":
            buf[pos] = op[2]
        elif op[0] == "flip":
            buf[op[1] // 8 % len(buf)] ^= 1 << (op[1] % 8)
        elif op[0] == "int":
            fmt, value = op[2], op[3] % (1 << 8 * struct.calcsize(op[2]))
            packed = struct.pack(fmt, value)
            buf[pos:pos + len(packed)] = packed
        elif op[0] == "cut":
            del buf[pos:]
        elif op[0] == "insert":
            buf[pos:pos] = op[2]
        else:
            del buf[pos:pos + op[2]]
    return bytes(buf)


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_files(seed, ops):
    damaged = _mutate(SEEDS[seed], ops)
    _exercise(damaged)
    if len(damaged) >= 16:
        _exercise(refooter(damaged))  # same damage, valid CRC: structure checks must hold


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.integers(0, 5), st.sampled_from(_INTERESTING))
def test_header_fields(seed, which, value):
    data = bytearray(SEEDS[seed])
    field = 8 + 4 * which  # flags, metadata/index offsets and sizes, data_offset
    data[field:field + 4] = struct.pack("<I", value % 2 ** 32)
    _exercise(refooter(bytes(data)))
