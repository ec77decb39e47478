"""Helpers for the speech tests: speech synthesized with espeak-ng at test time, and the
real Whisper base model imported to APR once per session (memoised like cli_util's demo
files, so every module shares one import)."""
import os
import shutil
import subprocess

import numpy as np

from apr_core.speech.audio import read_audio

# Utterances for the parity tests (Harvard sentences and plain prose).
UTTERANCES = ["The birch canoe slid on the smooth planks.",
              "Glue the sheet to the dark blue background.",
              "It is easy to tell the depth of a well.",
              "These days a chicken leg is a rare dish."]
LONG_TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles "
             "begins with a single step. Knowledge is power, and power tends to corrupt. "
             "The weather today is sunny with a gentle breeze from the west. Please remember to bring your umbrella tomorrow because it might "
             "rain in the afternoon. Scientists have discovered a new species of frog in the "
             "rainforest of South America. The library will be closed on Monday for "
             "maintenance work. Our team won the championship after a long and difficult "
             "season. Cooking pasta requires boiling water, a pinch of salt, and patience. The "
             "museum exhibits paintings from the eighteenth and nineteenth centuries.")
_IMPORTED = {}


def espeak_wav(text, voice="en"):
    """WAV bytes of `text` spoken by espeak-ng (22.05 kHz mono 16-bit)."""
    assert shutil.which("espeak-ng"), "espeak-ng is part of the test setup"
    return subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True,
                          capture_output=True).stdout


def espeak(text, voice="en"):
    """16 kHz float32 samples of `text` spoken by espeak-ng."""
    return read_audio(espeak_wav(text, voice))


def whisper_apr(directory, folder):
    """The APR file `apr import` makes of the CTranslate2 directory (made once)."""
    if directory not in _IMPORTED:
        from apr_native.cli.main import main
        path = os.path.join(str(folder), "whisper-base.apr")
        os.environ.setdefault("APR_QUIET", "1")
        assert main(["import", directory, "-o", path, "--json"]) == 0
        _IMPORTED[directory] = path
    return _IMPORTED[directory]


def faster_whisper_model(directory):
    """faster-whisper on the same directory (the oracle), float32 on the CPU."""
    from faster_whisper import WhisperModel
    return WhisperModel(directory, device="cpu", compute_type="float32", cpu_threads=2)


def words(text):
    """Lower-cased words without punctuation, for word-equal comparisons."""
    return "".join(c.lower() if c.isalnum() or c.isspace() else " " for c in text).split()


def word_error_rate(reference, hypothesis):
    """Levenshtein distance over words / reference words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


__all__ = ["espeak", "espeak_wav", "whisper_apr", "faster_whisper_model", "words",
           "word_error_rate",
           "UTTERANCES", "LONG_TEXT", "np"]
