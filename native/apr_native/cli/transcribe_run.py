"""`apr run WHISPER.apr --input AUDIO`: speech to text with a Whisper model.

    apr run whisper.apr --input talk.wav                    # the text on stdout
    apr run whisper.apr --input talk.wav --format srt       # or vtt, json, verbose_json
    apr run whisper.apr --input talk.wav --language de --task translate --beam 5

`run_cmd.run_run` sends here every run whose model is a Whisper APR file (or that names
`--input`). Audio: WAV of any rate, depth and channel count (read in numpy), other
containers through PyAV. `--temperature T` decodes at that one temperature (no fallback);
`--seed` seeds sampling at temperatures above 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict

from apr_core.errors import AprError, ErrorCode

FORMATS = ("txt", "srt", "vtt", "json", "verbose_json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The speech options of `apr run` (used only with a Whisper model)."""
    group = p.add_argument_group("speech (Whisper models)")
    group.add_argument("--input", metavar="AUDIO", help="audio file to transcribe (WAV; "
                       "other containers need PyAV)")
    group.add_argument("--format", choices=FORMATS, default=None,
                       help="transcript format (default txt; --json means json)")
    group.add_argument("--language", help="spoken language code (default: detected)")
    group.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    group.add_argument("--beam", type=int, default=1, metavar="N",
                       help="beam size (1: greedy)")
    group.add_argument("--initial-prompt", help="text that conditions the first window")
    group.add_argument("--no-timestamps", action="store_true",
                       help="decode text tokens only (one segment per window)")


def is_whisper_file(path: str) -> bool:
    """True when `path` is an APR file whose metadata says Whisper (reads the header only;
    any other format is told by its first bytes, so a GGUF's vocabulary is not decoded
    here on its way to `apr run`)."""
    if not (isinstance(path, str) and os.path.isfile(path)):
        return False
    from apr_core.formats.detect import APR1, APR2, MAGICS
    with open(path, "rb") as f:
        if MAGICS.get(f.read(4)) not in (APR1, APR2):
            return False
    from apr_core.formats.open import open_model
    from apr_core.speech.model import is_whisper
    try:
        with open_model(path, verify=False) as model:
            return is_whisper(model.metadata)
    except AprError:
        return False


def _options(args: argparse.Namespace) -> Dict[str, Any]:
    options: Dict[str, Any] = {"language": args.language, "task": args.task,
                               "beam_size": args.beam, "initial_prompt": args.initial_prompt,
                               "without_timestamps": args.no_timestamps}
    if args.beam < 1:
        raise AprError(ErrorCode.ARGUMENT, "--beam must be at least 1", beam=args.beam)
    temperature = getattr(args, "sampler_temperature", None)
    if temperature is not None:
        options["temperature"] = float(temperature)
    if getattr(args, "seed", None) is not None:
        options["seed"] = int(args.seed)
    return options


def run_transcribe(args: argparse.Namespace) -> int:
    from apr_core.speech.audio import read_audio
    from apr_core.speech.subtitles import render
    from apr_core.speech.transcribe import transcribe

    from ..speech_native import load_native_whisper
    if not args.input:
        raise AprError(ErrorCode.ARGUMENT, "a Whisper model transcribes audio: pass "
                       "--input AUDIO", model=args.model)
    try:
        with open(args.input, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read the audio file: {}".format(exc.strerror),
                       path=args.input)
    options = _options(args)
    start = time.perf_counter()
    model = load_native_whisper(args.model)
    loaded = time.perf_counter()
    samples = read_audio(data)
    result = transcribe(model, samples, **options)
    seconds = time.perf_counter() - loaded
    fmt = args.format or ("json" if args.json else "txt")
    if fmt == "json":
        # the CLI's JSON keeps every segment field (times, avg log-prob) plus timings
        import json
        body = dict(result, timings={"load_s": round(loaded - start, 3),
                                     "transcribe_s": round(seconds, 3),
                                     "rtf": round(result["duration"] / seconds, 3)
                                     if seconds > 0 else None})
        sys.stdout.write(json.dumps(body, ensure_ascii=False, indent=2) + "\n")
    else:
        text = render(result, fmt)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    return 0
