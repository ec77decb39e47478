"""Whisper's log-mel front end against reference ports written here, loop by loop, from
their sources: librosa's `filters.mel(norm="slaney", htk=False)` (what OpenAI's
mel_filters.npz holds) and Whisper's `audio.log_mel_spectrogram` (torch.stft with a
periodic Hann window, centred, reflect padding; |.|^2 without the last frame; mel; log10
clamp 1e-10; max-8 floor; (x+4)/4). Audio is real speech synthesized with espeak-ng."""
from __future__ import annotations

import math

import numpy as np
import pytest

from apr_core.speech.mel import log_mel_spectrogram, mel_filters, pad_or_trim
from speech_util import espeak


def librosa_mel_reference(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa.filters.mel, Slaney scale and area normalisation, element by element."""
    def hz_to_mel(f):
        f_sp, min_log_hz = 200.0 / 3, 1000.0
        if f < min_log_hz:
            return f / f_sp
        return min_log_hz / f_sp + math.log(f / min_log_hz) / (math.log(6.4) / 27.0)

    def mel_to_hz(m):
        f_sp, min_log_hz = 200.0 / 3, 1000.0
        min_log_mel = min_log_hz / f_sp
        if m < min_log_mel:
            return f_sp * m
        return min_log_hz * math.exp(math.log(6.4) / 27.0 * (m - min_log_mel))

    n_bins = n_fft // 2 + 1
    fft_freqs = [i * sr / n_fft for i in range(n_bins)]
    low, high = hz_to_mel(0.0), hz_to_mel(sr / 2.0)
    mel_f = [mel_to_hz(low + (high - low) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    weights = np.zeros((n_mels, n_bins))
    for i in range(n_mels):
        for j, f in enumerate(fft_freqs):
            lower = (f - mel_f[i]) / (mel_f[i + 1] - mel_f[i])
            upper = (mel_f[i + 2] - f) / (mel_f[i + 2] - mel_f[i + 1])
            weights[i, j] = max(0.0, min(lower, upper)) * 2.0 / (mel_f[i + 2] - mel_f[i])
    return weights


def whisper_log_mel_reference(audio: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Whisper's log_mel_spectrogram with torch.stft spelled out frame by frame."""
    n_fft, hop = 400, 160
    window = np.array([0.5 - 0.5 * math.cos(2 * math.pi * i / n_fft) for i in range(n_fft)])
    padded = np.pad(audio.astype(np.float64), (n_fft // 2, n_fft // 2), mode="reflect")
    n_frames = 1 + (len(padded) - n_fft) // hop
    power = np.zeros((n_fft // 2 + 1, n_frames))
    for t in range(n_frames):
        spectrum = np.fft.rfft(padded[t * hop:t * hop + n_fft] * window)
        power[:, t] = np.abs(spectrum) ** 2
    mel = filters.astype(np.float64) @ power[:, :-1]
    log_spec = np.log10(np.clip(mel, 1e-10, None))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_the_librosa_formula(n_mels):
    ours = mel_filters(n_mels)
    reference = librosa_mel_reference(16000, 400, n_mels)
    assert ours.shape == (n_mels, 201) and ours.dtype == np.float32
    assert np.abs(ours - reference).max() < 1e-7          # float32 rounding of ~2e-2 values


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_whisper_reference_on_speech(n_mels):
    audio = espeak("The birch canoe slid on the smooth planks.")
    filters = librosa_mel_reference(16000, 400, n_mels)
    reference = whisper_log_mel_reference(audio, filters)
    ours = log_mel_spectrogram(audio, n_mels, padding=0)
    assert ours.shape == reference.shape == (n_mels, audio.size // 160)
    assert np.abs(ours - reference).max() < 1e-4


def test_padding_and_windows():
    audio = espeak("Glue the sheet to the dark blue background.")
    padded = log_mel_spectrogram(audio)                    # faster-whisper appends 160 zeros
    assert padded.shape[1] == (audio.size + 160) // 160
    window = pad_or_trim(padded)
    assert window.shape == (80, 3000)
    assert np.array_equal(window[:, :padded.shape[1]], padded)
    assert not window[:, padded.shape[1]:].any()
    assert pad_or_trim(np.ones((80, 3100), np.float32)).shape == (80, 3000)
