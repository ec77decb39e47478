"""WAV reading and resampling (apr_core.speech.audio) against independent facts: WAV files
written by the standard library's `wave` module (and by hand for float and
WAVE_FORMAT_EXTENSIBLE), the analytic sine they hold, and coded errors for bad files."""
from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core.errors import AprError, ErrorCode
from apr_core.speech.audio import SAMPLE_RATE, parse_wav, read_audio, resample

RATE = 22050
TONE = 0.5 * np.sin(2 * np.pi * 440.0 * np.arange(RATE // 4) / RATE)   # 0.25 s of A4


def _pcm_wav(values: np.ndarray, width: int, channels: int = 1, rate: int = RATE) -> bytes:
    """A PCM WAV written by the stdlib `wave` module."""
    scale = float(1 << (8 * width - 1))
    ints = np.clip(np.round(values * scale), -scale, scale - 1).astype(np.int64)
    if width == 1:
        raw = (ints + 128).astype(np.uint8).tobytes()
    else:
        raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints) \
            if width == 3 else ints.astype("<i{}".format(width)).tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(raw)
    return buffer.getvalue()


def _float_wav(values: np.ndarray, dtype: str, extensible: bool = False,
               rate: int = RATE) -> bytes:
    data = values.astype(dtype).tobytes()
    width = np.dtype(dtype).itemsize
    if extensible:   # cbSize 22, valid bits, channel mask, subformat GUID (float)
        fmt = struct.pack("<HHIIHHHHI16s", 0xFFFE, 1, rate, rate * width, width, 8 * width,
                          22, 8 * width, 4, struct.pack("<H", 3) + bytes(14))
    else:
        fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * width, width, 8 * width)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + \
        b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("width, tolerance", [(1, 1 / 127), (2, 1 / 32000), (3, 1e-6),
                                              (4, 1e-7)])
def test_pcm_depths_decode_to_the_written_signal(width, tolerance):
    samples, rate = parse_wav(_pcm_wav(TONE, width))
    assert rate == RATE and samples.dtype == np.float32
    assert np.abs(samples - TONE).max() <= tolerance


@pytest.mark.parametrize("dtype, extensible", [("<f4", False), ("<f8", False),
                                               ("<f4", True)])
def test_float_and_extensible_wavs(dtype, extensible):
    samples, rate = parse_wav(_float_wav(TONE, dtype, extensible))
    assert rate == RATE
    assert np.abs(samples - TONE).max() < 1e-7


def test_stereo_is_mixed_to_mono():
    left, right = TONE, -0.25 * TONE
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    samples, _ = parse_wav(_pcm_wav(interleaved, 2, channels=2))
    assert np.abs(samples - (left + right) / 2).max() < 1e-4


def test_resampling_keeps_a_band_limited_tone():
    out = read_audio(_float_wav(TONE, "<f4"))              # 22050 Hz -> 16 kHz
    expected = 0.5 * np.sin(2 * np.pi * 440.0 * np.arange(out.size) / SAMPLE_RATE)
    assert out.size == int(np.ceil(TONE.size * SAMPLE_RATE / RATE))
    interior = slice(200, out.size - 200)                  # away from the zero padding
    assert np.abs(out[interior] - expected[interior]).max() < 1e-3


def test_downsampling_removes_what_the_new_rate_cannot_hold():
    t = np.arange(48000) / 48000.0
    high = np.sin(2 * np.pi * 12000.0 * t)                 # above the 8 kHz Nyquist of 16 kHz
    out = resample(high, 48000, SAMPLE_RATE)
    assert np.abs(out[200:-200]).max() < 1e-3              # attenuated, not aliased to 4 kHz


def test_same_rate_is_a_copy():
    assert np.array_equal(resample(TONE, RATE, RATE), TONE.astype(np.float32))


@pytest.mark.parametrize("mutate, code", [
    (lambda d: d.replace(b"fmt ", b"junk"), ErrorCode.FORMAT),          # no fmt chunk
    (lambda d: d.replace(b"data", b"dat4"), ErrorCode.FORMAT),          # no data chunk
    (lambda d: d[:d.index(b"fmt ") + 12], ErrorCode.CORRUPT),           # fmt cut short
    (lambda d: d.replace(b"fmt \x10\x00\x00\x00\x01\x00", b"fmt \x10\x00\x00\x00\x02\x00"),
     ErrorCode.UNSUPPORTED),                                            # ADPCM
])
def test_bad_wavs_are_coded_errors(mutate, code):
    with pytest.raises(AprError) as info:
        read_audio(mutate(_pcm_wav(TONE, 2)))
    assert info.value.code is code, info.value


def test_streamed_wav_with_an_unpatched_size_reads_what_is_there():
    data = bytearray(_pcm_wav(TONE, 2))
    at = data.index(b"data") + 4
    struct.pack_into("<I", data, at, 0xFFFFFFFF)           # writer never patched the size
    samples, _ = parse_wav(bytes(data[:-3]))               # and the last frame is cut
    assert samples.size == TONE.size - 2
    assert np.abs(samples - TONE[:samples.size]).max() < 1 / 32000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzzed_wav_bodies_only_raise_apr_errors(body):
    header = b"RIFF" + struct.pack("<I", len(body) + 4) + b"WAVE"
    try:
        samples, rate = parse_wav(header + body)
    except AprError:
        return
    assert samples.dtype == np.float32 and rate > 0
