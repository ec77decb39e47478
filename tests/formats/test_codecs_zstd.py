"""zstd codec tests: every importable back end, round trips, and the size-capped decoder.

`zstandard` (and `backports.zstd` or Python 3.14's `compression.zstd` when present) are
oracles here; the hostile-frame tests measure allocations with tracemalloc.
"""
from __future__ import annotations

import os
import struct
import tracemalloc

import pytest

from apr_core.codecs import BLOCK_SIZE, CODEC_ZSTD
from apr_core.codecs import framing
from apr_core.codecs import lz4 as pure_lz4
from apr_core.codecs import zstd
from apr_core.errors import AprError, ErrorCode

_TEXT = open(pure_lz4.__file__, "rb").read()
SAMPLES = {
    "empty": b"",
    "one": b"\x07",
    "text": _TEXT,
    "text-x8": _TEXT * 8,
    "zeros-64k": bytes(BLOCK_SIZE),
    "f32-weights": struct.pack("<4096f", *[((i * 7919) % 1000 - 500) / 25000 for i in range(4096)]),
    "random-64k": os.urandom(BLOCK_SIZE),
    "64k-plus-1": os.urandom(BLOCK_SIZE // 2) * 2 + b"!",
}


def _is_corrupt(exc_info):
    return exc_info.value.code is ErrorCode.CORRUPT


def _zstd_backends():
    found = []
    try:
        import zstandard
        found.append(zstd.ZstandardBackend(zstandard))
    except ImportError:
        pass
    module = zstd._load_stdlib_style()
    if module is not None:
        found.append(zstd.StdlibBackend(module))
    return found


ZSTD_BACKENDS = _zstd_backends()
needs_zstd = pytest.mark.skipif(not ZSTD_BACKENDS, reason="no zstd library importable")
backend_param = pytest.mark.parametrize("backend", ZSTD_BACKENDS,
                                        ids=[b.name for b in ZSTD_BACKENDS])


def _zstandard():
    return pytest.importorskip("zstandard")


@needs_zstd
@backend_param
@pytest.mark.parametrize("name", ["empty", "one", "text", "zeros-64k", "f32-weights",
                                  "random-64k", "64k-plus-1"])
@pytest.mark.parametrize("level", [None, 1, 3, 19, -5])
def test_zstd_round_trip(backend, name, level):
    data = SAMPLES[name]
    packed = zstd.compress(data, level, backend=backend)
    for reader in ZSTD_BACKENDS:   # every library reads every other library's frames
        assert zstd.decompress(packed, len(data), backend=reader) == data


@needs_zstd
def test_zstd_default_backend():
    data = SAMPLES["text"]
    assert zstd.available() and zstd.backend_name()
    assert zstd.decompress(zstd.compress(data), len(data)) == data


def _frame_without_size(data: bytes) -> bytes:
    cobj = _zstandard().ZstdCompressor(level=1, write_content_size=False).compressobj()
    return cobj.compress(data) + cobj.flush()


def _bomb(total: int) -> bytes:
    """A frame without a declared size that expands to `total` zero bytes."""
    cobj = _zstandard().ZstdCompressor(level=1, write_content_size=False).compressobj()
    chunk = bytes(1 << 20)
    parts = [cobj.compress(chunk) for _ in range(total >> 20)]
    return b"".join(parts) + cobj.flush()


def _set_declared_size(frame: bytes, size: int) -> bytes:
    """Rewrite the content size field of a frame header (which must have one)."""
    descriptor = frame[4]
    single_segment = bool(descriptor & 0x20)
    width = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    assert width, "frame has no content size field"
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    value = size - 256 if width == 2 else size   # the 2-byte form is stored minus 256
    return frame[:start] + value.to_bytes(width, "little") + frame[start + width:]


def _refused_with_peak(frame, size, backend):
    """`zstd.decompress(frame, size)` must raise AprError: (its ExceptionInfo, the peak
    bytes traced while it ran)."""
    tracemalloc.start()
    try:
        with pytest.raises(AprError) as exc:
            zstd.decompress(frame, size, backend=backend)
        return exc, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@needs_zstd
@backend_param
def test_zstd_declared_huge_size_refused_before_allocating(backend):
    zstandard = _zstandard()
    cobj = zstandard.ZstdCompressor(level=1).compressobj(size=1 << 33)
    header = cobj.compress(bytes(1024))   # header written with an 8-byte size field
    frame = header + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert frame[4] >> 6 == 3   # an 8-byte content size field
    frame = _set_declared_size(frame, 1 << 45)
    exc, peak = _refused_with_peak(frame, 1024, backend=backend)
    assert _is_corrupt(exc)
    assert peak < 1 << 20


class _SpyBackend:
    """Wraps a back end and records whether decoding was attempted."""

    def __init__(self, inner):
        self.inner, self.module, self.name, self.decoded = inner, inner.module, inner.name, 0

    def declared_size(self, data):
        return self.inner.declared_size(data)

    def decompress(self, data, raw_size):
        self.decoded += 1
        return self.inner.decompress(data, raw_size)


@needs_zstd
@backend_param
def test_zstd_declared_size_mismatch_refused_before_decoding(backend):
    data = SAMPLES["text"]
    spy = _SpyBackend(backend)
    frame = zstd.compress(data, 3, backend=backend)
    assert zstd.decompress(frame, len(data), backend=spy) == data and spy.decoded == 1
    with pytest.raises(AprError) as exc:
        zstd.decompress(frame, len(data) * 4, backend=spy)
    assert _is_corrupt(exc) and spy.decoded == 1


@needs_zstd
@backend_param
def test_zstd_bomb_without_declared_size_is_capped(backend):
    frame = _bomb(256 << 20)   # 256 MiB of zeros in a few KiB
    assert len(frame) < 64 << 10
    exc, peak = _refused_with_peak(frame, 1000, backend=backend)
    assert _is_corrupt(exc)
    assert peak < 32 << 20, peak


@needs_zstd
@backend_param
def test_zstd_bomb_with_understated_size_is_capped(backend):
    zstandard = _zstandard()
    total = 256 << 20
    cobj = zstandard.ZstdCompressor(level=1).compressobj(size=total)
    chunk = bytes(1 << 20)
    frame = b"".join(cobj.compress(chunk) for _ in range(total >> 20)) + cobj.flush()
    frame = _set_declared_size(frame, 100000)   # lies: says 100 kB, holds 256 MiB
    exc, peak = _refused_with_peak(frame, 100000, backend=backend)
    assert _is_corrupt(exc)
    assert peak < 32 << 20, peak


@needs_zstd
@backend_param
def test_zstd_frame_without_declared_size(backend):
    data = SAMPLES["text-x8"]
    frame = _frame_without_size(data)
    assert zstd.decompress(frame, len(data), backend=backend) == data
    for size in (len(data) - 1, len(data) + 1, 0):
        with pytest.raises(AprError) as exc:
            zstd.decompress(frame, size, backend=backend)
        assert _is_corrupt(exc)


@needs_zstd
@backend_param
def test_zstd_malformed_frames_are_corrupt(backend):
    data = SAMPLES["text"]
    good = zstd.compress(data, 3, backend=backend)
    cases = [
        ("empty", b"", len(data)),
        ("garbage", b"not a zstd frame at all", len(data)),
        ("declared size mismatch", good, len(data) + 1),
        ("declared size mismatch small", good, 1),
        ("truncated", good[:-5], len(data)),
        ("header only", good[:6], len(data)),
        ("trailing bytes", good + b"junk", len(data)),
        ("two frames", good + good, len(data)),
        ("negative raw size", good, -1),
    ]
    # No content checksum is written (the APR footer CRC covers the file), so only damage
    # zstd's structure is bound to notice is asserted here; the fuzz tests cover the rest.
    cases.append(("bad magic", b"\x00" + good[1:], len(data)))
    for label, frame, size in cases:
        with pytest.raises(AprError) as exc:
            zstd.decompress(frame, size, backend=backend)
        assert _is_corrupt(exc), label


@needs_zstd
@backend_param
@pytest.mark.parametrize("level", [23, 100, -(1 << 17) - 1, "3", 1.5])
def test_zstd_bad_level_is_argument_error(backend, level):
    with pytest.raises(AprError) as exc:
        zstd.compress(b"abc" * 100, level, backend=backend)
    assert exc.value.code is ErrorCode.ARGUMENT


def test_zstd_missing_backend_is_unsupported(monkeypatch):
    monkeypatch.setattr(zstd, "_BACKEND", None)
    assert not zstd.available()
    for call in (lambda: zstd.compress(b"abc"), lambda: zstd.decompress(b"abc", 3),
                 lambda: framing.encode_blocks(b"abc", CODEC_ZSTD)):
        with pytest.raises(AprError) as exc:
            call()
        assert exc.value.code is ErrorCode.UNSUPPORTED
        assert "compression.zstd" in exc.value.message and "zstandard" in exc.value.message
