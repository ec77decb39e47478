"""Codec tests: pure-Python LZ4 against the `lz4` package, and the APR v2 block framing.

The `lz4` package is the oracle here (a test dependency), never a runtime
dependency of apr_core. zstd has its own file, test_codecs_zstd.py.
"""
from __future__ import annotations

import os
import random
import struct
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apr_core.codecs import BLOCK_SIZE, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from apr_core.codecs import framing
from apr_core.codecs import lz4 as pure_lz4
from apr_core.codecs import zstd
from apr_core.errors import AprError, ErrorCode

lz4_block = pytest.importorskip("lz4.block")


def _samples():
    rng = np.random.RandomState(1234)
    weights = (rng.randn(16384) * 0.02).astype(np.float32)
    quant = rng.randint(0, 16, 65536).astype(np.uint8)
    quant[::7] = 0
    text = open(pure_lz4.__file__, "rb").read()
    far = os.urandom(70000)
    return {
        "empty": b"",
        "one": b"\x07",
        "twelve": b"abcdefghijkl",
        "thirteen": b"a" * 13,
        "short-repeat": b"ab" * 7,
        "zeros-64k": bytes(BLOCK_SIZE),
        "pattern-3": b"xyz" * 5000,
        "pattern-7-odd": b"1234567" * 999 + b"!",
        "random-1000": random.Random(5).getrandbits(8000).to_bytes(1000, "little"),
        "random-64k": os.urandom(BLOCK_SIZE),
        "text": text,
        "text-x8": text * 8,
        "f32-weights": weights.tobytes(),
        "f32-arange": np.arange(16384, dtype=np.float32).tobytes(),
        "f16-weights": weights.astype(np.float16).tobytes(),
        "bf16-weights": (weights.view(np.uint32) >> 16).astype(np.uint16).tobytes(),
        "nibbles": quant.tobytes(),
        "run-then-text": b"\x00" * 300 + text[:2000] + b"\xff" * 1000,
        # Repeats farther apart than the 16-bit offset window: must not be matched.
        "far-repeat": far + far,
        "64k-plus-1": os.urandom(BLOCK_SIZE // 2) * 2 + b"!",
    }


SAMPLES = _samples()
IDS = sorted(SAMPLES)


def _is_corrupt(exc_info):
    return exc_info.value.code is ErrorCode.CORRUPT


# --------------------------------------------------------------------------------------------
# LZ4: pure codec against the reference package


@pytest.mark.parametrize("name", IDS)
def test_pure_compress_read_by_lz4_package(name):
    data = SAMPLES[name]
    packed = pure_lz4.compress(data)
    assert lz4_block.decompress(packed, uncompressed_size=len(data)) == data
    assert pure_lz4.decompress(packed, len(data)) == data


@pytest.mark.parametrize("name", IDS)
@pytest.mark.parametrize("mode", ["default", "fast", "high_compression"])
def test_pure_decompress_reads_lz4_package(name, mode):
    data = SAMPLES[name]
    kwargs = {"store_size": False, "mode": mode}
    if mode == "fast":
        kwargs["acceleration"] = 8
    packed = lz4_block.compress(data, **kwargs)
    assert pure_lz4.decompress(packed, len(data)) == data
    assert pure_lz4.decompress(bytearray(packed), len(data)) == data
    assert pure_lz4.decompress(memoryview(packed), len(data)) == data


def test_pure_compression_ratio_close_to_reference():
    for name in ("text", "text-x8", "zeros-64k", "pattern-3", "nibbles"):
        data = SAMPLES[name]
        ours = len(pure_lz4.compress(data))
        ref = len(lz4_block.compress(data, store_size=False))
        assert ours <= ref * 1.1 + 16, (name, ours, ref)


def test_incompressible_expands_by_format_overhead_only():
    data = SAMPLES["random-64k"]
    packed = pure_lz4.compress(data)
    # One literal run: token + ceil((n - 15 + 1) / 255) length bytes.
    assert len(packed) == 1 + (len(data) - 15) // 255 + 1 + len(data)


@pytest.mark.parametrize("pattern,length", [
    (b"a", 100), (b"ab", 101), (b"abc", 4), (b"abc", 5), (b"abcdefg", 300), (b"xy", 70000)])
def test_overlapping_match_exact(pattern, length):
    # Hand-built block: literals `pattern`, one match at offset len(pattern), 12 literals.
    tail = b"0123456789AB"
    extra = length - 4
    token = (min(len(pattern), 15) << 4) | min(extra, 15)
    block = bytearray([token]) + pattern + struct.pack("<H", len(pattern))
    if extra >= 15:
        rest = extra - 15
        block += b"\xff" * (rest // 255) + bytes([rest % 255])
    block += bytes([len(tail) << 4]) + tail
    expected = pattern + (pattern * (length // len(pattern) + 1))[:length] + tail
    assert pure_lz4.decompress(bytes(block), len(expected)) == expected
    assert lz4_block.decompress(bytes(block), uncompressed_size=len(expected)) == expected


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=3000))
def test_property_binary_round_trip(data):
    packed = pure_lz4.compress(data)
    assert pure_lz4.decompress(packed, len(data)) == data
    assert lz4_block.decompress(packed, uncompressed_size=len(data)) == data
    assert pure_lz4.decompress(lz4_block.compress(data, store_size=False), len(data)) == data


@st.composite
def repetitive(draw):
    """Data made of repeated chunks, so the match finder has overlaps and long runs to find."""
    parts = draw(st.lists(st.tuples(st.binary(min_size=1, max_size=12),
                                    st.integers(min_value=1, max_value=60)), max_size=30))
    return b"".join(chunk * count for chunk, count in parts)


@settings(deadline=None, max_examples=300)
@given(repetitive())
def test_property_repetitive_round_trip(data):
    packed = pure_lz4.compress(data)
    assert lz4_block.decompress(packed, uncompressed_size=len(data)) == data
    for mode in ("default", "high_compression"):
        ref = lz4_block.compress(data, store_size=False, mode=mode)
        assert pure_lz4.decompress(ref, len(data)) == data


def test_dispatch_uses_package_and_falls_back(monkeypatch):
    data = SAMPLES["text"]
    assert pure_lz4.HAVE_LZ4_PACKAGE
    with_package = pure_lz4.compress_block(data)
    assert with_package == lz4_block.compress(data, store_size=False)
    monkeypatch.setattr(pure_lz4, "_lz4block", None)
    without = pure_lz4.compress_block(data)
    assert without == pure_lz4.compress(data)
    # Each side reads the other's blocks.
    assert pure_lz4.decompress_block(with_package, len(data)) == data
    monkeypatch.undo()
    assert pure_lz4.decompress_block(without, len(data)) == data


@pytest.mark.parametrize("use_package", [True, False])
def test_dispatch_checks_exact_size(monkeypatch, use_package):
    if not use_package:
        monkeypatch.setattr(pure_lz4, "_lz4block", None)
    data = SAMPLES["text"]
    packed = pure_lz4.compress(data)
    for size in (len(data) - 1, len(data) + 1, 0, 10 ** 9, -1):
        with pytest.raises(AprError) as exc:
            pure_lz4.decompress_block(packed, size)
        assert _is_corrupt(exc)
    assert pure_lz4.decompress_block(b"\x00", 0) == b""


def _seq(literals: bytes, offset: int, match_len: int) -> bytes:
    """One LZ4 sequence with short lengths (no extension bytes)."""
    return bytes([(len(literals) << 4) | (match_len - 4)]) + literals + struct.pack("<H", offset)


LAST = b"\x80abcdefgh"   # a valid final sequence: 8 literals
MALFORMED_LZ4 = [
    ("empty input", b"", 0),
    ("empty input with size", b"", 5),
    ("zero size needs the zero token", b"\x10", 0),
    ("zero size with extra byte", b"\x00\x00", 0),
    ("literals past input", b"\x50abc", 5),
    ("literals past raw size", b"\x50abcde", 4),
    ("output shorter than raw size", b"\x30abc", 4),
    ("trailing bytes after last literals", b"\x30abcX", 3),
    ("truncated literal length", b"\xf0", 20),
    ("truncated literal length run", b"\xf0\xff\xff", 600),
    ("offset zero", _seq(b"a", 0, 4) + LAST, 13),
    ("offset before output start", _seq(b"a", 2, 4) + LAST, 13),
    ("offset far before output start", _seq(b"abc", 0xFFFF, 4) + LAST, 15),
    ("match with no literals yet", _seq(b"", 1, 4) + LAST, 12),
    ("truncated offset", b"\x10a\x01", 5),
    ("truncated offset byte 2", b"\x10a", 5),
    ("match past raw size", _seq(b"a", 1, 8) + LAST, 8),
    ("block ends after a match", b"\x8fabcdefgh\x01\x00" + b"\xff" * 5 + b"\x00", 1400),
    ("truncated match length", b"\x8fabcdefgh\x01\x00" + b"\xff" * 6, 1400),
    ("negative raw size", b"\x00", -1),
    ("raw size beyond any expansion", b"\x00", 10 ** 9),
    ("raw size beyond 255x", b"\x1f" + b"a" + b"\x01\x00" + b"\xff" * 10 + b"\x00", 5000),
]

# The C decoder behind lz4.block copies from offset 0 (reading bytes it just reserved); the
# pure decoder refuses it. Every other case is refused by both back ends.
C_DECODER_ACCEPTS = {"offset zero"}


@pytest.mark.parametrize("case", MALFORMED_LZ4, ids=[c[0] for c in MALFORMED_LZ4])
def test_malformed_lz4_is_corrupt(case):
    _, block, raw_size = case
    with pytest.raises(AprError) as exc:
        pure_lz4.decompress(block, raw_size)
    assert _is_corrupt(exc)
    if case[0] in C_DECODER_ACCEPTS:
        return
    with pytest.raises(AprError) as exc:
        pure_lz4.decompress_block(block, raw_size)
    assert _is_corrupt(exc)


def test_raw_size_must_be_integer():
    with pytest.raises(AprError) as exc:
        pure_lz4.decompress(b"\x00", 0.0)
    assert exc.value.code is ErrorCode.ARGUMENT
    assert pure_lz4.decompress(b"\x10a", np.int64(1)) == b"a"


def test_raw_size_beyond_address_space_is_memory_error():
    with pytest.raises(AprError) as exc:
        pure_lz4.decompress(b"\x00" * 10, sys.maxsize + 1)
    assert exc.value.code is ErrorCode.MEMORY


@pytest.mark.parametrize("block", [
    # 1 MiB literal run announced by extension bytes.
    b"\xf0" + b"\xff" * 4112 + b"\x01" + bytes(1 << 20),
    # 1 MiB overlapping match after one literal.
    b"\x1f" + b"a" + b"\x01\x00" + b"\xff" * 4112 + b"\x00" + b"\x50hello",
], ids=["long-literals", "long-match"])
def test_decoder_memory_bounded_by_raw_size(block):
    # A record claiming far more than raw_size is refused before its bytes are copied.
    tracemalloc.start()
    try:
        with pytest.raises(AprError) as exc:
            pure_lz4.decompress(block, 4000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _is_corrupt(exc)
    assert peak < 64 << 10, peak


@pytest.mark.parametrize("name", ["text", "nibbles", "pattern-7-odd", "twelve"])
def test_every_truncation_is_corrupt(name):
    data = SAMPLES[name]
    packed = pure_lz4.compress(data)
    step = max(1, len(packed) // 120)
    for cut in list(range(0, len(packed), step)) + [len(packed) - 1]:
        with pytest.raises(AprError) as exc:
            pure_lz4.decompress(packed[:cut], len(data))
        assert _is_corrupt(exc)


# --------------------------------------------------------------------------------------------
# Block framing

ALL_CODECS = [CODEC_NONE, CODEC_LZ4] + ([CODEC_ZSTD] if zstd.available() else [])


def _headers(payload: bytes):
    """(stored_len, is_raw) per block, by walking the framing independently."""
    out, pos = [], 0
    while pos < len(payload):
        stored = struct.unpack_from("<I", payload, pos)[0]
        length = stored & 0x7FFFFFFF
        out.append((length, bool(stored & 0x80000000)))
        pos += 4 + length
    assert pos == len(payload)
    return out


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("size", [0, 1, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1,
                                  3 * BLOCK_SIZE + 5])
def test_framing_round_trip(codec, size):
    text = (SAMPLES["text"] * (size // len(SAMPLES["text"]) + 1))[:size]
    payload = framing.encode_blocks(text, codec)
    assert framing.decode_blocks(payload, codec, size) == text
    chunks = list(framing.iter_decode_blocks(payload, codec, size))
    assert [len(c) for c in chunks] == [min(BLOCK_SIZE, size - i)
                                        for i in range(0, size, BLOCK_SIZE)]
    assert b"".join(chunks) == text
    assert framing.decode_blocks(bytearray(payload), codec, size) == text
    assert framing.decode_blocks(memoryview(payload), codec, size) == text
    headers = _headers(payload)
    assert len(headers) == framing.block_count(size)
    if codec != CODEC_NONE:
        # Text shrinks, so every block of more than a few bytes is stored compressed.
        sizes = [min(BLOCK_SIZE, size - i) for i in range(0, size, BLOCK_SIZE)]
        assert all(not raw for (_, raw), n in zip(headers, sizes) if n > 1000)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_framing_incompressible_blocks_stored_raw(codec):
    data = os.urandom(2 * BLOCK_SIZE + 100)
    payload = framing.encode_blocks(data, codec)
    assert _headers(payload) == [(BLOCK_SIZE, True), (BLOCK_SIZE, True), (100, True)]
    assert len(payload) == len(data) + 12
    assert framing.decode_blocks(payload, codec, len(data)) == data


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_framing_mixed_blocks(codec):
    data = os.urandom(BLOCK_SIZE) + bytes(BLOCK_SIZE) + os.urandom(10)
    payload = framing.encode_blocks(memoryview(bytearray(data)), codec)
    flags = [raw for _, raw in _headers(payload)]
    assert flags == ([True, True, True] if codec == CODEC_NONE else [True, False, True])
    assert framing.decode_blocks(payload, codec, len(data)) == data


def test_framing_accepts_numpy_buffers():
    weights = np.arange(50000, dtype=np.float32).reshape(100, 500)
    payload = framing.encode_blocks(memoryview(weights), CODEC_LZ4)
    assert framing.decode_blocks(payload, CODEC_LZ4, weights.nbytes) == weights.tobytes()


def test_framing_lz4_package_and_pure_interoperate(monkeypatch):
    data = SAMPLES["text-x8"] + SAMPLES["f32-arange"]
    with_package = framing.encode_blocks(data, CODEC_LZ4)
    monkeypatch.setattr(pure_lz4, "_lz4block", None)
    pure_payload = framing.encode_blocks(data, CODEC_LZ4)
    assert framing.decode_blocks(with_package, CODEC_LZ4, len(data)) == data
    monkeypatch.undo()
    assert framing.decode_blocks(pure_payload, CODEC_LZ4, len(data)) == data


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_single_block_dispatch(codec):
    data = SAMPLES["text"]
    packed = framing.compress(codec, data, None)
    assert framing.decompress(codec, packed, len(data)) == data
    if codec == CODEC_NONE:
        assert packed == data
        with pytest.raises(AprError) as exc:
            framing.decompress(codec, data, len(data) + 1)
        assert _is_corrupt(exc)


@pytest.mark.parametrize("codec", [3, 15, -1, 1 << 40, "lz4", None])
def test_unknown_codec_is_unsupported(codec):
    calls = [lambda: framing.compress(codec, b"abc"),
             lambda: framing.decompress(codec, b"abc", 3),
             lambda: framing.encode_blocks(b"abc", codec),
             lambda: framing.decode_blocks(b"\x03\x00\x00\x80abc", codec, 3),
             lambda: framing.iter_decode_blocks(b"\x03\x00\x00\x80abc", codec, 3)]
    for call in calls:
        with pytest.raises(AprError) as exc:
            call()
        assert exc.value.code is ErrorCode.UNSUPPORTED


def _u32(value: int) -> bytes:
    return struct.pack("<I", value)


def _malformed_framing():
    text = SAMPLES["text-x8"][:BLOCK_SIZE + 500]
    good = framing.encode_blocks(text, CODEC_LZ4)
    first = struct.unpack_from("<I", good)[0]
    second_at = 4 + first
    raw_one = _u32(3 | 0x80000000) + b"abc"
    return [
        ("truncated header", good[:second_at + 2], len(text)),
        ("block past payload", good[:-1], len(text)),
        ("trailing bytes", good + b"\x00", len(text)),
        ("trailing block", good + raw_one, len(text)),
        ("missing block", good[:second_at], len(text)),
        ("raw size says fewer blocks", good, BLOCK_SIZE),
        ("raw size too large for payload", good, 10 * BLOCK_SIZE),
        ("raw block too short", raw_one, 4),
        ("raw block too long", raw_one, 2),
        ("raw block shorter than BLOCK_SIZE mid-tensor",
         raw_one + _u32(3 | 0x80000000) + b"def", BLOCK_SIZE + 3),
        ("zero-length compressed block", _u32(0), 1),
        ("zero-length raw block", _u32(0x80000000), 1),
        ("empty payload for data", b"", 1),
        ("data for empty tensor", raw_one, 0),
        ("block decompresses short", _u32(4) + b"\x30abc", 4),
        ("block with bad lz4", _u32(4) + b"\xf0abc", 4),
        ("huge length field", _u32(0x7FFFFFFF) + b"abc", 3),
        ("raw size absurd", good, 1 << 50),
        ("negative raw size", b"", -1),
    ]


MALFORMED_FRAMING = _malformed_framing()


@pytest.mark.parametrize("case", MALFORMED_FRAMING, ids=[c[0] for c in MALFORMED_FRAMING])
def test_malformed_framing_is_corrupt(case):
    _, payload, raw_size = case
    with pytest.raises(AprError) as exc:
        framing.decode_blocks(payload, CODEC_LZ4, raw_size)
    assert _is_corrupt(exc)


def test_framing_raw_size_beyond_address_space_is_memory_error():
    with pytest.raises(AprError) as exc:
        framing.decode_blocks(b"\x00" * 64, CODEC_LZ4, sys.maxsize + 1)
    assert exc.value.code is ErrorCode.MEMORY


def test_iter_decode_validates_before_yielding():
    data = SAMPLES["text-x8"][:3 * BLOCK_SIZE]
    payload = framing.encode_blocks(data, CODEC_LZ4) + b"x"
    # The structural error surfaces at the call, before any chunk is handed out.
    with pytest.raises(AprError) as exc:
        framing.iter_decode_blocks(payload, CODEC_LZ4, len(data))
    assert _is_corrupt(exc)


def test_bad_block_error_names_the_block():
    data = SAMPLES["text-x8"][:2 * BLOCK_SIZE]
    payload = bytearray(framing.encode_blocks(data, CODEC_LZ4))
    second = 4 + struct.unpack_from("<I", payload)[0]
    payload[second + 4] = 0x00   # block 1 now starts with a match before any output
    chunks = framing.iter_decode_blocks(bytes(payload), CODEC_LZ4, len(data))
    assert next(chunks) == data[:BLOCK_SIZE]
    with pytest.raises(AprError) as exc:
        next(chunks)
    assert _is_corrupt(exc) and exc.value.context["block"] == 1
