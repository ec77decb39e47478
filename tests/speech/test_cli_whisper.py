"""`apr import DIR` on the real CTranslate2 Whisper base directory and
`apr run WHISPER.apr --input x.wav` through the CLI (in-process, as a pipe sees it):
the text equals apr_core's own transcription (itself checked against faster-whisper in
test_whisper_real.py), srt/json carry the segments, and mistakes get coded exit codes."""
import json

import pytest

from apr_core.speech.audio import read_audio
from apr_core.speech.model import load_whisper
from apr_core.speech.transcribe import transcribe
from cli_util import apr
from speech_util import UTTERANCES, espeak_wav, whisper_apr, words

pytestmark = [pytest.mark.native, pytest.mark.real_model]


@pytest.fixture(scope="module")
def whisper_file(whisper_base_dir, tmp_path_factory):
    return whisper_apr(whisper_base_dir, tmp_path_factory.mktemp("whisper_cli"))


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "speech.wav"
    path.write_bytes(espeak_wav(UTTERANCES[2]))
    return str(path)


def test_import_reports_a_whisper_model(whisper_base_dir, tmp_path):
    code, out, err = apr("import", whisper_base_dir, "-o", tmp_path / "w.apr", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["architecture"] == "whisper"
    assert report["tensors"] == 203 + 1     # 212 variables - 9 scalars, + the mel filters
    model = load_whisper(str(tmp_path / "w.apr"))
    assert model.config.n_audio_layer == model.config.n_text_layer == 6
    assert model.config.n_mels == 80 and model.mel_filters.shape == (80, 201)
    assert model.net.w["encoder.conv1.weight"].shape == (512, 80, 3)


def test_run_prints_the_transcript(whisper_file, wav):
    code, out, err = apr("run", whisper_file, "--input", wav, "--temperature", "0")
    assert code == 0, err
    with open(wav, "rb") as handle:
        expected = transcribe(load_whisper(whisper_file), read_audio(handle.read()),
                              temperature=0.0)
    assert out.strip() == expected["text"]
    assert len(words(out)) >= 6


def test_run_formats(whisper_file, wav):
    code, out, err = apr("run", whisper_file, "--input", wav, "--format", "json",
                         "--language", "en", "--temperature", "0")
    assert code == 0, err
    result = json.loads(out)
    assert result["language"] == "en" and result["segments"]
    segment = result["segments"][0]
    assert 0 <= segment["start"] < segment["end"] <= result["duration"] + 0.02
    assert segment["avg_logprob"] < 0
    code, srt, err = apr("run", whisper_file, "--input", wav, "--format", "srt",
                         "--language", "en", "--temperature", "0")
    assert code == 0, err
    assert srt.startswith("1\n00:00:0") and "-->" in srt


def test_mistakes_are_coded(whisper_file, tmp_path):
    code, _, err = apr("run", whisper_file)                     # no --input
    assert code == 2 and "E011" in err
    code, _, err = apr("run", whisper_file, "--input", tmp_path / "missing.wav")
    assert code == 3 and "E007" in err
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    code, _, err = apr("run", whisper_file, "--input", junk)
    assert code == 4 and "E001" in err
