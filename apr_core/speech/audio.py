"""Audio input for Whisper: WAV bytes -> float32 mono samples at 16 kHz.

`read_audio` parses RIFF/WAVE itself (PCM 8/16/24/32-bit, IEEE float 32/64, any channel
count and sample rate, WAVE_FORMAT_EXTENSIBLE), bounded like every other parser here:
chunk sizes are checked against the bytes present, a data chunk that claims more than the
file holds (a streamed WAV whose writer never patched the size) is cut to the whole frames
present. Other containers (MP3, FLAC, OGG, M4A ...) are decoded by PyAV when it is
importable (natively it comes with faster-whisper), else they get a coded error.

`resample` is a band-limited (Kaiser-windowed sinc) resampler in numpy.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode

SAMPLE_RATE = 16000
FORMAT_PCM = 1
FORMAT_FLOAT = 3
FORMAT_EXTENSIBLE = 0xFFFE
MAX_CHANNELS = 64
# Resampler: zero crossings of the sinc on each side, Kaiser beta, output samples per chunk.
_TAPS_HALF = 32
_KAISER_BETA = 8.6
_CHUNK = 1 << 15


def read_audio(data: bytes) -> np.ndarray:
    """Float32 mono samples at 16 kHz from the bytes of an audio file (E001 for data that
    is neither WAV nor decodable by PyAV, E009 for a WAV encoding not handled)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    if len(view) >= 12 and bytes(view[0:4]) == b"RIFF" and bytes(view[8:12]) == b"WAVE":
        samples, rate = parse_wav(bytes(view))
        return resample(samples, rate, SAMPLE_RATE)
    return _decode_with_av(bytes(view))


def parse_wav(data: bytes) -> Tuple[np.ndarray, int]:
    """(float32 mono samples in [-1, 1], sample rate) of a RIFF/WAVE file."""
    fmt: Optional[Dict[str, int]] = None
    payload: Optional[bytes] = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id, size = struct.unpack("<4sI", data[pos:pos + 8])
        body_start = pos + 8
        body_end = body_start + size
        if chunk_id == b"fmt ":
            if body_end > len(data):
                raise AprError(ErrorCode.CORRUPT, "WAV fmt chunk is truncated", size=size,
                               left=len(data) - body_start)
            fmt = _parse_fmt(data[body_start:body_end])
        elif chunk_id == b"data":
            payload = data[body_start:min(body_end, len(data))]
            if fmt is not None:
                break                                   # nothing after it is needed
        pos = body_end + (size & 1)                     # chunks are word-aligned
    if fmt is None:
        raise AprError(ErrorCode.FORMAT, "WAV file has no fmt chunk")
    if payload is None:
        raise AprError(ErrorCode.FORMAT, "WAV file has no data chunk")
    return _decode_frames(payload, fmt), fmt["rate"]


def _parse_fmt(body: bytes) -> Dict[str, int]:
    if len(body) < 16:
        raise AprError(ErrorCode.FORMAT, "WAV fmt chunk is too short", size=len(body))
    tag, channels, rate, _, block_align, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == FORMAT_EXTENSIBLE:
        if len(body) < 40:
            raise AprError(ErrorCode.FORMAT, "WAVE_FORMAT_EXTENSIBLE fmt chunk is too short",
                           size=len(body))
        tag = struct.unpack("<H", body[24:26])[0]       # first field of the subformat GUID
    if not 1 <= channels <= MAX_CHANNELS:
        raise AprError(ErrorCode.FORMAT, "WAV channel count out of range", channels=channels)
    if not 1 <= rate <= 1_000_000:
        raise AprError(ErrorCode.FORMAT, "WAV sample rate out of range", rate=rate)
    width = bits // 8
    if (tag, bits) not in ((FORMAT_PCM, 8), (FORMAT_PCM, 16), (FORMAT_PCM, 24),
                           (FORMAT_PCM, 32), (FORMAT_FLOAT, 32), (FORMAT_FLOAT, 64)):
        raise AprError(ErrorCode.UNSUPPORTED, "WAV encoding not supported (PCM 8/16/24/32 "
                       "or float 32/64)", format_tag=tag, bits=bits)
    if block_align != width * channels:
        raise AprError(ErrorCode.FORMAT, "WAV block align does not match channels x width",
                       block_align=block_align, channels=channels, bits=bits)
    return {"tag": tag, "channels": channels, "rate": rate, "width": width}


def _decode_frames(payload: bytes, fmt: Dict[str, int]) -> np.ndarray:
    channels, width = fmt["channels"], fmt["width"]
    frames = len(payload) // (channels * width)
    raw = np.frombuffer(payload, dtype=np.uint8, count=frames * channels * width)
    if fmt["tag"] == FORMAT_FLOAT:
        values = raw.view("<f4" if width == 4 else "<f8").astype(np.float32)
    elif width == 1:
        values = (raw.astype(np.float32) - 128.0) / 128.0      # 8-bit WAV is unsigned
    elif width == 3:
        # [n, 3] little-endian bytes -> int32 with the sign of the top byte
        triples = raw.reshape(-1, 3).astype(np.int32)
        ints = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
        values = ints.astype(np.float32) / float(1 << 23)
    else:
        ints = raw.view("<i2" if width == 2 else "<i4")
        values = (ints.astype(np.float64) / float(1 << (8 * width - 1))).astype(np.float32)
    # [frames * channels] -> [frames, channels] -> mean over channels
    return values.reshape(frames, channels).mean(axis=1, dtype=np.float32)


def _decode_with_av(data: bytes) -> np.ndarray:
    try:
        import av
    except ImportError:
        raise AprError(ErrorCode.FORMAT, "not a WAV file, and PyAV (for other audio "
                       "containers) is not installed", magic=data[:8].hex())
    import io
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            stream = container.streams.audio[0]
            resampler = av.audio.resampler.AudioResampler(format="flt", layout="mono",
                                                          rate=SAMPLE_RATE)
            chunks = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except (av.error.FFmpegError, IndexError, ValueError) as exc:
        raise AprError(ErrorCode.FORMAT, "cannot decode audio", error=str(exc)[:200])
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32)


def _kaiser(x: np.ndarray) -> np.ndarray:
    """Kaiser window over x in [-1, 1] (np.i0 is in numpy 1.17)."""
    inside = np.clip(1.0 - x * x, 0.0, None)
    return np.i0(_KAISER_BETA * np.sqrt(inside)) / np.i0(_KAISER_BETA)


def resample(samples: Any, rate_in: int, rate_out: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling of 1-D float samples from `rate_in` to `rate_out` Hz.

    Each output sample is a Kaiser-windowed sinc interpolation of the input at its exact
    time, with the cutoff at the lower Nyquist frequency (anti-aliasing when going down).
    """
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if rate_in <= 0 or rate_out <= 0:
        raise AprError(ErrorCode.ARGUMENT, "sample rates must be positive", rate_in=rate_in,
                       rate_out=rate_out)
    if rate_in == rate_out or x.size == 0:
        return x.copy()
    g = math.gcd(int(rate_in), int(rate_out))
    up, down = rate_out // g, rate_in // g
    n_out = (x.size * up + down - 1) // down
    cutoff = min(1.0, up / down)                        # fraction of the input Nyquist
    half = int(math.ceil(_TAPS_HALF / cutoff))          # input taps on each side
    padded = np.concatenate([np.zeros(half, np.float32), x, np.zeros(half + 1, np.float32)])
    offsets = np.arange(-half + 1, half + 1)            # [taps]
    out = np.empty(n_out, dtype=np.float32)
    for start in range(0, n_out, _CHUNK):
        n = np.arange(start, min(n_out, start + _CHUNK))
        t = n * down / up                               # [m] exact input positions
        base = np.floor(t).astype(np.int64)
        frac = t - base
        # [m, taps]: distance of each contributing input sample from the output time
        dist = offsets[None, :] - frac[:, None]
        weights = cutoff * np.sinc(cutoff * dist) * _kaiser(dist / (half + 1))
        index = base[:, None] + offsets[None, :] + half
        out[start:start + n.size] = (padded[index] * weights).sum(axis=1)
    return out


__all__ = ["SAMPLE_RATE", "read_audio", "parse_wav", "resample"]
