"""Transcribe (or translate) audio of any length with Whisper: faster-whisper's
`generate_segments` without VAD or word timestamps.

The log-mel features of the whole input are cut into 30-second windows starting at
`seek`. For each window: the prompt is <|startofprev|> + up to 223 previous text tokens
(the initial prompt, then what earlier windows produced, reset after a window decoded
hotter than 0.5) + <|startoftranscript|> <|lang|> <|task|> [+ <|notimestamps|>]; decoding
falls back to the next temperature when the text compresses too well (zlib ratio above
`compression_ratio_threshold`: repetition) or the average log probability is below
`log_prob_threshold`, unless the window is silence (no-speech probability above
`no_speech_threshold` with a low log probability), which is skipped. The tokens are split
into segments at timestamp pairs and `seek` moves to the last complete timestamp (or the
window's end).
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import AprError, ErrorCode
from .audio import SAMPLE_RATE
from .decoding import MAX_INITIAL_TIMESTAMP, TIME_PRECISION, Generation, Rules, generate
from .mel import FRAME_SECONDS, N_FRAMES, log_mel_spectrogram, pad_or_trim
from .segments import split_segments

INPUT_STRIDE = 2                      # mel frames per encoder position (and timestamp step)
PROMPT_RESET_TEMPERATURE = 0.5


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw))


def detect_language(model: Any, audio_features: np.ndarray) -> Tuple[str, float, List]:
    """(code, probability, [(code, probability)] best first) from the decoder's first
    step after <|startoftranscript|>, over the language tokens only."""
    state = model.net.start(audio_features)
    hidden = model.net.decode(state, np.asarray([[model.sot]], dtype=np.int64))
    logits = model.net.logits(hidden[0, -1]).astype(np.float64)           # [V]
    codes = list(model.languages)
    picked = logits[[model.languages[c] for c in codes]]
    probs = np.exp(picked - picked.max())
    probs /= probs.sum()
    ranked = sorted(zip(codes, probs.tolist()), key=lambda item: -item[1])
    return ranked[0][0], ranked[0][1], ranked


def _rules(model: Any, timestamps: bool, suppress_blank: bool) -> Rules:
    g = model.generation
    suppress = sorted(set(list(g.get("non_speech_tokens") or []) + [
        model.transcribe_token, model.translate_token, model.sot, model.sot_prev,
        model.sot_lm] + ([model.no_speech] if model.no_speech is not None else [])))
    begin = (g.get("suppress_ids_begin") or []) if suppress_blank else []
    return Rules(np.asarray(suppress, dtype=np.int64), np.asarray(begin, dtype=np.int64),
                 timestamps, model.eot, model.no_timestamps, model.timestamp_begin,
                 model.vocab_size - 1,
                 model.timestamp_begin + int(round(MAX_INITIAL_TIMESTAMP / TIME_PRECISION)))


def _with_fallback(model: Any, features: np.ndarray, prompt: List[int], rules: Rules,
                   options: Dict[str, Any], rng: np.random.RandomState
                   ) -> Tuple[Generation, float]:
    """(generation, compression ratio) after temperature fallback."""
    results, below_ratio = [], []
    chosen: Optional[Tuple[Generation, float]] = None
    temperature = 0.0
    for temperature in options["temperatures"]:
        result = generate(model, features, prompt, rules, temperature,
                          options["beam_size"], options["best_of"], rng)
        ratio = compression_ratio(model.decode_text(result.tokens).strip())
        chosen = (result, ratio)
        results.append(chosen)
        retry = False
        if options["compression_ratio_threshold"] is not None:
            if ratio > options["compression_ratio_threshold"]:
                retry = True                                      # too repetitive
            else:
                below_ratio.append(chosen)
        low = options["log_prob_threshold"] is not None and \
            result.avg_logprob < options["log_prob_threshold"]
        if low:
            retry = True
        if low and options["no_speech_threshold"] is not None and \
                result.no_speech_prob > options["no_speech_threshold"]:
            retry = False                                         # silence: keep it
        if not retry:
            return chosen
    best = max(below_ratio or results, key=lambda item: item[0].avg_logprob)
    # the last temperature tried is what the prompt-reset rule looks at
    return best[0]._replace(temperature=temperature), best[1]


def transcribe(model: Any, samples: Any, language: Optional[str] = None,
               task: str = "transcribe", beam_size: int = 1,
               temperature: Union[float, Sequence[float]] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
               initial_prompt: Optional[str] = None, without_timestamps: bool = False,
               compression_ratio_threshold: Optional[float] = 2.4,
               log_prob_threshold: Optional[float] = -1.0,
               no_speech_threshold: Optional[float] = 0.6, suppress_blank: bool = True,
               seed: int = 0, condition_on_previous_text: bool = True,
               best_of: int = 5) -> Dict[str, Any]:
    """Transcribe float32 16 kHz `samples` (see the module docstring); returns the text,
    language, duration and the segments with their times and decoding statistics."""
    if task not in ("transcribe", "translate"):
        raise AprError(ErrorCode.ARGUMENT, "task must be transcribe or translate", task=task)
    if beam_size < 1 or best_of < 1:
        raise AprError(ErrorCode.ARGUMENT, "beam_size and best_of must be at least 1",
                       beam_size=beam_size, best_of=best_of)
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    duration = samples.size / SAMPLE_RATE
    features = log_mel_spectrogram(samples, model.config.n_mels, filters=model.mel_filters,
                                   product=getattr(model.net, "stft_product", None))
    content_frames = features.shape[-1] - 1
    probability = 1.0
    encoded = None          # (window, encoder output) of language detection, for reuse
    if not model.multilingual:
        language = "en"
    elif language is None:
        # on the first 30 s of all frames (the decoding windows leave out the last frame)
        first = pad_or_trim(features)
        encoded = (first, model.net.encode(first))
        language, probability, _ = detect_language(model, encoded[1])
    elif language not in model.languages:
        raise AprError(ErrorCode.ARGUMENT, "unknown language code", language=language,
                       known=", ".join(sorted(model.languages)))
    temperatures = list(temperature) if isinstance(temperature, (list, tuple)) \
        else [float(temperature)]
    options = {"temperatures": temperatures, "beam_size": beam_size, "best_of": best_of,
               "compression_ratio_threshold": compression_ratio_threshold,
               "log_prob_threshold": log_prob_threshold,
               "no_speech_threshold": no_speech_threshold}
    rules = _rules(model, not without_timestamps, suppress_blank)
    sot_sequence = model.sot_sequence(language, task)
    rng = np.random.RandomState(seed)
    all_tokens: List[int] = []
    if initial_prompt:
        all_tokens.extend(model.encode_text(" " + initial_prompt.strip()))
    reset_since = 0
    segments: List[Dict[str, Any]] = []
    seek = 0
    max_previous = model.config.n_text_ctx // 2 - 1
    while seek < content_frames:
        time_offset = seek * FRAME_SECONDS
        size = min(N_FRAMES, content_frames - seek)
        window = pad_or_trim(features[:, seek:seek + size])      # [n_mels, 3000]
        if encoded is not None and np.array_equal(window, encoded[0]):
            audio_features = encoded[1]          # the window detection encoded (> 30 s)
        else:
            audio_features = model.net.encode(window)            # [1500, d]
        encoded = None
        previous = all_tokens[reset_since:]
        prompt = ([model.sot_prev] + previous[-max_previous:] if previous else []) + \
            sot_sequence + ([model.no_timestamps] if without_timestamps else [])
        result, ratio = _with_fallback(model, audio_features, prompt, rules, options, rng)
        if no_speech_threshold is not None and result.no_speech_prob > no_speech_threshold \
                and not (log_prob_threshold is not None and
                         result.avg_logprob > log_prob_threshold):
            seek += size                                          # silence: skip the window
            continue
        previous_seek = seek
        pieces, seek = split_segments(result.tokens, model.timestamp_begin, time_offset,
                                      size, seek, INPUT_STRIDE, TIME_PRECISION)
        for piece in pieces:
            text = model.decode_text(piece["tokens"])
            if piece["start"] == piece["end"] or not text.strip():
                continue
            all_tokens.extend(piece["tokens"])
            segments.append({
                "id": len(segments) + 1, "seek": previous_seek,
                "start": piece["start"], "end": piece["end"],
                "text": text, "tokens": piece["tokens"], "temperature": result.temperature,
                "avg_logprob": result.avg_logprob, "compression_ratio": ratio,
                "no_speech_prob": result.no_speech_prob})
        if not condition_on_previous_text or result.temperature > PROMPT_RESET_TEMPERATURE:
            reset_since = len(all_tokens)
    return {"text": "".join(s["text"] for s in segments).strip(), "language": language,
            "language_probability": float(probability), "duration": duration, "task": task,
            "segments": segments}


__all__ = ["transcribe", "detect_language", "compression_ratio"]
