"""Transcripts as SRT, WebVTT, text and OpenAI's JSON shapes: times and texts round-trip
through independent parsers (`srt`, `webvtt-py`)."""
import datetime
import io
import json

import pytest

from apr_core.errors import AprError
from apr_core.speech.subtitles import FORMATS, render, timestamp

# The parsers are dev packages of the main Python (.venv38 has neither): the round-trip tests
# are marked `native`, the rest also runs on Python 3.8.


def _segment(i, start, end, text):
    return {"id": i, "seek": 0, "start": start, "end": end, "text": text, "tokens": [50364 + i],
            "temperature": 0.0, "avg_logprob": -0.25, "compression_ratio": 1.4,
            "no_speech_prob": 0.01}


# Times that exercise rounding to the millisecond, minutes, and hours past 99.
SEGMENTS = [(0.0, 2.4804, " Hello there."), (2.4804, 61.0006, " Grüße, 世界 — a second cue."),
            (3599.9996, 3725.5, " Line one\n\n line two --> not a timing"),
            (360000.25, 360001.0, " Past a hundred hours.")]
RESULT = {"text": "".join(t for _, _, t in SEGMENTS), "language": "en", "duration": 360001.0,
          "task": "transcribe",
          "segments": [_segment(i, s, e, t) for i, (s, e, t) in enumerate(SEGMENTS)]}


def _millis(seconds):
    return datetime.timedelta(milliseconds=int(round(seconds * 1000)))


@pytest.mark.native
def test_srt_round_trips_through_the_srt_package():
    import srt
    cues = list(srt.parse(render(RESULT, "srt")))
    assert [c.index for c in cues] == [1, 2, 3, 4]
    for cue, (start, end, text) in zip(cues, SEGMENTS):
        assert cue.start == _millis(start) and cue.end == _millis(end)
        assert cue.content.split() == text.replace("-->", "->").split()
    assert "\n\n" not in cues[2].content  # a blank line inside would end the cue


@pytest.mark.native
def test_vtt_round_trips_through_webvtt_py():
    import webvtt
    text = render(RESULT, "vtt")
    assert text.startswith("WEBVTT\n\n")
    captions = webvtt.from_buffer(io.StringIO(text)).captions
    assert len(captions) == len(SEGMENTS)
    for caption, (start, end, words) in zip(captions, SEGMENTS):
        assert caption.start_in_seconds * 1000 + caption.start_time.milliseconds \
            == int(round(start * 1000))
        assert caption.end_in_seconds * 1000 + caption.end_time.milliseconds \
            == int(round(end * 1000))
        assert caption.text.split() == words.replace("-->", "->").split()


def test_timestamps_are_fixed_width_and_rounded():
    assert timestamp(0) == "00:00:00,000"
    assert timestamp(3599.9996) == "01:00:00,000"
    assert timestamp(61.0006, ".") == "00:01:01.001"
    assert timestamp(360000.25) == "100:00:00,250"
    with pytest.raises(AprError):
        timestamp(-1.0)
    with pytest.raises(AprError):
        timestamp(float("nan"))


def test_openai_json_shapes():
    assert json.loads(render(RESULT, "json")) == {"text": RESULT["text"].strip()}
    verbose = json.loads(render(RESULT, "verbose_json"))
    assert set(verbose) == {"task", "language", "duration", "text", "segments"}
    assert verbose["task"] == "transcribe" and verbose["duration"] == 360001.0
    assert verbose["language"] == "english"           # OpenAI's API names the language
    german = json.loads(render(dict(RESULT, language="de"), "verbose_json"))
    assert german["language"] == "german"
    assert verbose["segments"] == RESULT["segments"]        # every OpenAI segment key kept
    assert "Grüße" in render(RESULT, "verbose_json")         # UTF-8, not \\u escapes


def test_text_and_empty_results():
    assert render(RESULT, "text") == render(RESULT, "txt") == RESULT["text"].strip() + "\n"
    empty = {"text": "", "segments": [_segment(0, 0.0, 1.0, "  ")], "duration": 1.0}
    assert render(empty, "srt") == ""
    assert render(empty, "vtt") == "WEBVTT\n\n"


def test_unknown_format_is_a_coded_error():
    with pytest.raises(AprError) as err:
        render(RESULT, "docx")
    assert err.value.code.category == "ARGUMENT"
    assert set(FORMATS) >= {"text", "json", "verbose_json", "srt", "vtt"}
