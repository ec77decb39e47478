"""Whisper base (real weights, CTranslate2 layout) imported to APR and run by apr_core,
against faster-whisper / CTranslate2 on the same directory (the oracle) and on the same
samples: features, encoder output, greedy and beam transcriptions (short utterances and a
clip longer than 30 s), timestamps, language detection + translation, and the model.bin
reader on the real file truncated and corrupted."""
from __future__ import annotations

import os

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.ctranslate2 import read_ctranslate2
from apr_core.io import FileSource, WindowSource
from apr_core.speech.mel import log_mel_spectrogram, pad_or_trim
from apr_core.speech.model import load_whisper
from apr_core.speech.transcribe import _rules, transcribe
from speech_util import (LONG_TEXT, UTTERANCES, espeak, faster_whisper_model, whisper_apr,
                         words)

pytestmark = [pytest.mark.native, pytest.mark.real_model]

# Encoder: both sides compute in float32 from the same float16 weights, but sum in other
# orders (numpy's BLAS vs CTranslate2's GEMM) and approximate erf differently; measured
# max |diff| 1.0e-3 on outputs of magnitude up to 24 (mean |diff| 1.7e-6). The bound below
# is 2.5x the measured maximum and still 1e-4 relative to the largest output.
ENCODER_ATOL = 2.5e-3


@pytest.fixture(scope="module")
def model(whisper_base_dir, tmp_path_factory):
    return load_whisper(whisper_apr(whisper_base_dir, tmp_path_factory.mktemp("whisper")))


@pytest.fixture(scope="module")
def oracle(whisper_base_dir):
    return faster_whisper_model(whisper_base_dir)


def _oracle_transcribe(oracle, samples, **options):
    segments, info = oracle.transcribe(samples, vad_filter=False, **options)
    return list(segments), info


def test_special_tokens_and_suppression_match_faster_whisper(model, oracle):
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens
    tokenizer = Tokenizer(oracle.hf_tokenizer, True, task="transcribe", language="en")
    assert _rules(model, True, True).suppress.tolist() == \
        list(get_suppressed_tokens(tokenizer, [-1]))
    assert (model.sot, model.eot, model.no_timestamps, model.sot_prev, model.no_speech) == \
        (tokenizer.sot, tokenizer.eot, tokenizer.no_timestamps, tokenizer.sot_prev,
         tokenizer.no_speech)
    assert model.timestamp_begin == tokenizer.timestamp_begin
    assert model.sot_sequence("en", "transcribe") == tokenizer.sot_sequence
    assert model.multilingual == oracle.model.is_multilingual


def test_features_match_faster_whisper(oracle):
    audio = espeak(UTTERANCES[0])
    ours = log_mel_spectrogram(audio, 80)
    theirs = oracle.feature_extractor(audio)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < 1e-4


def test_encoder_matches_ctranslate2(model, oracle):
    import ctranslate2
    mel = pad_or_trim(log_mel_spectrogram(espeak(UTTERANCES[1]), 80))
    ours = model.net.encode(mel)                                       # [1500, 512]
    theirs = np.array(oracle.model.encode(ctranslate2.StorageView.from_array(mel[None])))
    theirs = theirs.reshape(ours.shape)
    assert np.abs(ours - theirs).max() < ENCODER_ATOL
    assert np.abs(ours - theirs).max() < 1e-4 * np.abs(theirs).max()


@pytest.mark.parametrize("text", UTTERANCES[:3])
def test_greedy_transcription_equals_faster_whisper(model, oracle, text):
    audio = espeak(text)
    ours = transcribe(model, audio, beam_size=1, temperature=0.0, without_timestamps=True)
    theirs, info = _oracle_transcribe(oracle, audio, beam_size=1, temperature=0.0,
                                      without_timestamps=True)
    assert words(ours["text"]) == words(" ".join(s.text for s in theirs))
    assert [s["tokens"] for s in ours["segments"]] == [s.tokens for s in theirs]
    assert ours["language"] == info.language == "en"
    assert abs(ours["language_probability"] - info.language_probability) < 1e-3
    for mine, ref in zip(ours["segments"], theirs):
        assert abs(mine["avg_logprob"] - ref.avg_logprob) < 1e-3
        assert abs(mine["no_speech_prob"] - ref.no_speech_prob) < 1e-3


def _check_timestamps(segments, duration):
    previous_end = 0.0
    for segment in segments:
        assert previous_end - 1e-9 <= segment["start"] < segment["end"], segments
        assert segment["end"] <= duration + 0.02        # timestamps are 20 ms steps
        previous_end = segment["end"]


def test_long_audio_with_timestamps_equals_faster_whisper(model, oracle):
    audio = espeak(LONG_TEXT)
    duration = audio.size / 16000
    assert duration > 30.0
    ours = transcribe(model, audio, beam_size=1, temperature=0.0)
    theirs, _ = _oracle_transcribe(oracle, audio, beam_size=1, temperature=0.0)
    assert words(ours["text"]) == words(" ".join(s.text for s in theirs))
    assert [(s["seek"], s["tokens"]) for s in ours["segments"]] == \
        [(s.seek, s.tokens) for s in theirs]
    times = [t for s in ours["segments"] for t in (s["start"], s["end"])]
    assert times == pytest.approx([t for s in theirs for t in (s.start, s.end)], abs=1e-9)
    assert max(s["seek"] for s in ours["segments"]) > 0      # a second window was decoded
    _check_timestamps(ours["segments"], duration)
    assert abs(ours["duration"] - duration) < 1e-9


def test_beam_search_equals_faster_whisper(model, oracle):
    audio = espeak(UTTERANCES[3])
    ours = transcribe(model, audio, beam_size=5, temperature=0.0)
    theirs, _ = _oracle_transcribe(oracle, audio, beam_size=5, temperature=0.0)
    assert [s["tokens"] for s in ours["segments"]] == [s.tokens for s in theirs]
    assert words(ours["text"]) == words(" ".join(s.text for s in theirs))
    _check_timestamps(ours["segments"], audio.size / 16000)


def test_language_detection_and_translation_equal_faster_whisper(model, oracle):
    audio = espeak("Guten Morgen. Heute ist das Wetter sehr schön, und wir gehen in den "
                   "Park.", voice="de")
    ours = transcribe(model, audio, task="translate", beam_size=1, temperature=0.0)
    theirs, info = _oracle_transcribe(oracle, audio, task="translate", beam_size=1,
                                      temperature=0.0)
    assert ours["language"] == info.language == "de"
    assert ours["task"] == "translate"
    assert [s["tokens"] for s in ours["segments"]] == [s.tokens for s in theirs]
    assert words(ours["text"]) == words(" ".join(s.text for s in theirs))


def test_truncated_or_corrupted_real_model_bin_is_a_coded_error(whisper_base_dir, tmp_path):
    path = os.path.join(whisper_base_dir, "model.bin")
    with FileSource(path) as whole:
        assert len(read_ctranslate2(whole).tensors) == 212
        for size in (3, 40, 1000, whole.size // 2, whole.size - 1):
            with pytest.raises(AprError) as info:
                read_ctranslate2(WindowSource(whole, 0, size))
            assert info.value.code is ErrorCode.CORRUPT, (size, info.value)
        head = bytearray(whole.read(0, 4096))
    # the first variable's rank byte, after version, spec string, revision and count
    first_name = 4 + 2 + len(b"WhisperSpec\0") + 4 + 4
    rank_at = first_name + 2 + head[first_name] + 256 * head[first_name + 1]
    head[rank_at] = 200
    bad = tmp_path / "model.bin"
    with open(path, "rb") as source:
        bad.write_bytes(bytes(head) + source.read()[4096:])
    with pytest.raises(AprError) as info:
        read_ctranslate2(str(bad))
    assert info.value.code is ErrorCode.FORMAT
