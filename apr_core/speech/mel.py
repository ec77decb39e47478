"""Whisper's log-mel front end in numpy.

`mel_filters(n_mels)` is librosa's `filters.mel(sr=16000, n_fft=400, n_mels, htk=False,
norm="slaney")`: triangles on the Slaney mel scale (linear below 1 kHz, logarithmic above),
each scaled to unit area -- the matrix OpenAI ships as `mel_filters.npz`. It is computed
here (and stored by `apr import`) rather than shipped.

`log_mel_spectrogram` is Whisper's `audio.log_mel_spectrogram`: STFT (n_fft 400, hop 160,
periodic Hann window, centred with reflect padding), |.|^2 without the last frame, the mel
filters, log10 clamped at 1e-10, floored at (max - 8), then (x + 4) / 4. As faster-whisper
does, the whole input is analysed at once (`padding` zero samples appended first) and each
30-second window is cut from the result with `pad_or_trim`.

The STFT is a real DFT computed as one matrix product of the windowed frames with a
[n_fft, 2 * (n_fft / 2 + 1)] cos | -sin basis (float64, built once): the same code in every
runtime, without numpy.fft (Pyodide 0.17's pocketfft aborts the interpreter in current
Chromium: "Cannot convert N to a BigInt"). For 400-point frames the product costs about
what the FFT does natively (BLAS) and is cheaper than Python overhead in the browser.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from .audio import SAMPLE_RATE

N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE            # 480000 samples per window
N_FRAMES = N_SAMPLES // HOP_LENGTH                  # 3000 mel frames per window
FRAME_SECONDS = HOP_LENGTH / SAMPLE_RATE            # 0.01 s per mel frame


def hz_to_mel(freqs: Any) -> np.ndarray:
    """Slaney mel scale: 3 mels per 200 Hz below 1 kHz, log steps of ln(6.4)/27 above."""
    freqs = np.asarray(freqs, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = freqs / f_sp
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    log_region = freqs >= min_log_hz
    mels = np.where(log_region, min_log_mel + np.log(np.maximum(freqs, min_log_hz) /
                                                     min_log_hz) / logstep, mels)
    return mels


def mel_to_hz(mels: Any) -> np.ndarray:
    """Inverse of `hz_to_mel`."""
    mels = np.asarray(mels, dtype=np.float64)
    f_sp = 200.0 / 3
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)),
                    f_sp * mels)


def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] float32 Slaney-normalised triangular filters."""
    fft_freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)        # [n_bins]
    mel_points = np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2.0), n_mels + 2)
    hz_points = mel_to_hz(mel_points)                                       # [n_mels + 2]
    widths = np.diff(hz_points)                                             # [n_mels + 1]
    ramps = hz_points[:, None] - fft_freqs[None, :]                         # [n_mels+2, n_bins]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))                     # [n_mels, n_bins]
    weights *= (2.0 / (hz_points[2:n_mels + 2] - hz_points[:n_mels]))[:, None]
    return weights.astype(np.float32)


def _hann(n: int) -> np.ndarray:
    """Periodic Hann window (torch.hann_window(n))."""
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)).astype(np.float32)


_DFT_BASES: Dict[int, np.ndarray] = {}
_FRAMES_PER_PRODUCT = 3000          # one 30 s window's frames per DFT product


def dft_basis(n: int) -> np.ndarray:
    """[n, 2 * (n // 2 + 1)] float64: the Hann window times cos | -sin of the real DFT
    (x @ basis = [Re | Im] of rfft(x * window)); the window is folded in."""
    basis = _DFT_BASES.get(n)
    if basis is None:
        bins = n // 2 + 1
        # exact angles: k * j mod n keeps the argument in [0, 2 pi) (no large-argument error)
        phase = (np.arange(n)[:, None] * np.arange(bins)[None, :]) % n       # [n, bins]
        angle = 2.0 * np.pi * phase / n
        window = _hann(n).astype(np.float64)[:, None]
        basis = np.concatenate([np.cos(angle), -np.sin(angle)], axis=1) * window
        _DFT_BASES[n] = basis = np.ascontiguousarray(basis)
    return basis


def _product(frames: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """frames [n, N_FFT] float32 @ basis [N_FFT, 2 * bins] float64 -> [n, 2 * bins]."""
    return frames.astype(np.float64) @ basis


def power_spectrogram(samples: Any, product: Optional[Callable[..., np.ndarray]] = None
                      ) -> np.ndarray:
    """[N_FFT // 2 + 1, n_frames] |STFT|^2 of float32 samples, last frame dropped.
    `product(frames, basis)` (`_product`'s arguments; frames a strided view of the padded
    samples) computes the spectrum where a backend has a faster kernel (the browser's)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    pad = N_FFT // 2
    if x.size <= pad:                  # reflect padding needs more samples than the pad
        x = np.concatenate([x, np.zeros(pad + 1 - x.size, np.float32)])
    x = np.pad(x, (pad, pad), mode="reflect")
    n_frames = 1 + (x.size - N_FFT) // HOP_LENGTH
    # [n_frames, N_FFT] frames as a strided view (no copy until the window multiplies)
    frames = np.lib.stride_tricks.as_strided(
        x, shape=(n_frames, N_FFT), strides=(x.strides[0] * HOP_LENGTH, x.strides[0]))
    bins = N_FFT // 2 + 1
    basis = dft_basis(N_FFT)                                        # [N_FFT, 2 * bins]
    power = np.empty((bins, n_frames - 1), np.float32)              # [bins, n_frames-1]
    for first in range(0, n_frames - 1, _FRAMES_PER_PRODUCT):       # bounded temporaries
        last = min(first + _FRAMES_PER_PRODUCT, n_frames - 1)
        spectrum = (product or _product)(frames[first:last], basis)  # [frames, 2 * bins]
        power[:, first:last] = (spectrum[:, :bins] ** 2 + spectrum[:, bins:] ** 2).T
    return power


def log_mel_spectrogram(samples: Any, n_mels: int = 80, padding: int = HOP_LENGTH,
                        filters: Optional[np.ndarray] = None,
                        product: Optional[Callable[..., np.ndarray]] = None) -> np.ndarray:
    """[n_mels, n_frames] Whisper log-mel features of 16 kHz float32 samples (`product`:
    `power_spectrogram`'s)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if padding:
        x = np.concatenate([x, np.zeros(padding, np.float32)])
    bank = mel_filters(n_mels) if filters is None else np.asarray(filters, np.float32)
    mel = bank @ power_spectrogram(x, product)                 # [n_mels, n_frames]
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def pad_or_trim(features: np.ndarray, length: int = N_FRAMES) -> np.ndarray:
    """[n_mels, length]: cut, or zero-pad on the right (the encoder takes 3000 frames)."""
    features = features[:, :length]
    if features.shape[1] < length:
        features = np.pad(features, ((0, 0), (0, length - features.shape[1])))
    return np.ascontiguousarray(features, dtype=np.float32)


__all__ = ["N_FFT", "HOP_LENGTH", "N_SAMPLES", "N_FRAMES", "FRAME_SECONDS", "mel_filters",
           "log_mel_spectrogram", "pad_or_trim", "power_spectrogram", "dft_basis"]
