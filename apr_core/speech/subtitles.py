"""A transcription result as text, subtitles or OpenAI's JSON shapes.

    render(result, "srt")   # "1\\n00:00:00,000 --> 00:00:02,480\\nHello there.\\n\\n2\\n..."
    render(result, "vtt")   # "WEBVTT\\n\\n00:00:00.000 --> 00:00:02.480\\nHello there.\\n\\n..."
    openai_body(result, "verbose_json")   # the dict OpenAI's /v1/audio/transcriptions returns

`result` is what `apr_core.speech.transcribe.transcribe` returns: `text`, `language`,
`duration`, `task` and `segments` (each with `id`, `seek`, `start`, `end`, `text`, `tokens`,
`temperature`, `avg_logprob`, `compression_ratio`, `no_speech_prob`). The formats are the
`response_format` values of OpenAI's API (`text`, `json`, `verbose_json`, `srt`, `vtt`) plus
`txt`, the CLI's name for `text`. Pure stdlib: it runs in Pyodide and on Python 3.8.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List

from ..errors import AprError, ErrorCode
from .languages import language_name

FORMATS = ("txt", "text", "json", "verbose_json", "srt", "vtt")
JSON_FORMATS = ("json", "verbose_json")
# MIME type of each format as an HTTP response
MEDIA_TYPES = {"txt": "text/plain", "text": "text/plain", "json": "application/json",
               "verbose_json": "application/json", "srt": "application/x-subrip",
               "vtt": "text/vtt"}
# the keys of one segment in OpenAI's verbose_json, in their order
SEGMENT_KEYS = ("id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                "compression_ratio", "no_speech_prob")


def check_format(fmt: str) -> str:
    """`fmt` when it is one of FORMATS, else a coded ARGUMENT error naming the choices."""
    if fmt not in FORMATS:
        raise AprError(ErrorCode.ARGUMENT, "unknown transcript format {!r}; choose one of {}"
                       .format(fmt, ", ".join(FORMATS)), format=fmt)
    return fmt


def timestamp(seconds: float, decimal: str = ",") -> str:
    """`HH:MM:SS,mmm` (SRT) or with `decimal="."` `HH:MM:SS.mmm` (WebVTT), rounded to the
    millisecond; hours grow past 99 rather than wrap."""
    if seconds != seconds or seconds < 0:      # NaN or negative: a broken result, not a time
        raise AprError(ErrorCode.VALIDATION, "segment time must be a non-negative number",
                       seconds=seconds)
    millis = int(round(seconds * 1000.0))
    hours, millis = divmod(millis, 3600000)
    minutes, millis = divmod(millis, 60000)
    secs, millis = divmod(millis, 1000)
    return "{:02d}:{:02d}:{:02d}{}{:03d}".format(hours, minutes, secs, decimal, millis)


def _cue_text(text: str) -> str:
    """One cue's text: no blank lines (they end a cue in SRT and WebVTT) and no `-->`
    (it would read as a timing line)."""
    lines = [line.strip() for line in str(text).strip().splitlines()]
    return "\n".join(line for line in lines if line).replace("-->", "->")


def _cues(result: Dict[str, Any]) -> List[Any]:
    """(start, end, text) of the segments that have text, in order."""
    cues = []
    for segment in result.get("segments") or ():
        text = _cue_text(segment.get("text", ""))
        if text:
            start = float(segment["start"])
            cues.append((start, max(start, float(segment["end"])), text))
    return cues


def to_srt(result: Dict[str, Any]) -> str:
    """SubRip: numbered cues from 1, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, a blank line after each."""
    blocks = ["{}\n{} --> {}\n{}\n".format(i, timestamp(start), timestamp(end), text)
              for i, (start, end, text) in enumerate(_cues(result), 1)]
    return "\n".join(blocks)


def to_vtt(result: Dict[str, Any]) -> str:
    """WebVTT: the `WEBVTT` header, then `HH:MM:SS.mmm --> HH:MM:SS.mmm` cues."""
    blocks = ["{} --> {}\n{}\n".format(timestamp(start, "."), timestamp(end, "."), text)
              for start, end, text in _cues(result)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def openai_body(result: Dict[str, Any], fmt: str) -> Dict[str, Any]:
    """The JSON object OpenAI returns for `json` ({"text"}) or `verbose_json` ({"task",
    "language" (its English name, as OpenAI writes it), "duration", "text", "segments"})."""
    text = str(result.get("text", "")).strip()
    if fmt == "json":
        return {"text": text}
    if fmt != "verbose_json":
        raise AprError(ErrorCode.ARGUMENT, "{!r} is not a JSON transcript format".format(fmt))
    segments = [{key: segment.get(key) for key in SEGMENT_KEYS}
                for segment in result.get("segments") or ()]
    # OpenAI reports the language by name ("english"); apr's results carry the code
    return {"task": result.get("task", "transcribe"),
            "language": language_name(result.get("language")),
            "duration": result.get("duration"), "text": text, "segments": segments}


def render(result: Dict[str, Any], fmt: str) -> str:
    """`result` as `fmt` (one of FORMATS): plain text ending in a newline, SRT, WebVTT, or
    OpenAI's JSON (`json`, `verbose_json`) serialized without ASCII escapes."""
    check_format(fmt)
    if fmt in ("txt", "text"):
        return str(result.get("text", "")).strip() + "\n"
    if fmt == "srt":
        return to_srt(result)
    if fmt == "vtt":
        return to_vtt(result)
    return json.dumps(openai_body(result, fmt), ensure_ascii=False)


__all__ = ["FORMATS", "JSON_FORMATS", "MEDIA_TYPES", "check_format", "openai_body", "render",
           "timestamp", "to_srt", "to_vtt"]
