"""Whisper's special tokens and generation settings, as stored in APR metadata.

`generation_config(vocabulary, ct2_config, tokenizer)` builds the `whisper_generation`
metadata block at import: the ids of the special tokens (found by their text in the
model's vocabulary, as CTranslate2 and faster-whisper do), the language codes with their
ids, the suppression lists (CTranslate2's `suppress_ids` / `suppress_ids_begin`, and
faster-whisper's `non_speech_tokens` computed with the model's own tokenizer), and the
alignment heads when the source has them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ..errors import AprError, ErrorCode

SPECIAL_TOKENS = {"eot": "<|endoftext|>", "sot": "<|startoftranscript|>",
                  "translate": "<|translate|>", "transcribe": "<|transcribe|>",
                  "sot_lm": "<|startoflm|>", "sot_prev": "<|startofprev|>",
                  "no_timestamps": "<|notimestamps|>"}
NO_SPEECH_TOKENS = ("<|nospeech|>", "<|nocaptions|>")       # newer, older models
# faster-whisper's Tokenizer.non_speech_tokens: speaker tags and annotations to suppress.
_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + \
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
_MISCELLANEOUS = "♩♪♫♬♭♮♯"


def _find(vocabulary: Sequence[str], text: str) -> Optional[int]:
    try:
        return list(vocabulary).index(text)
    except ValueError:
        return None


def non_speech_tokens(encode: Any) -> List[int]:
    """Token ids of symbols that mark non-speech (faster-whisper's rule), from
    `encode(text) -> ids`."""
    result = {encode(" -")[0], encode(" '")[0]}
    for symbol in _SYMBOLS + list(_MISCELLANEOUS):
        for ids in (encode(symbol), encode(" " + symbol)):
            if len(ids) == 1 or symbol in _MISCELLANEOUS:
                result.add(ids[0])
    return sorted(result)


def generation_config(vocabulary: Sequence[str], ct2_config: Dict[str, Any],
                      encode: Any) -> Dict[str, Any]:
    """The `whisper_generation` metadata block (see the module docstring)."""
    index = {token: i for i, token in enumerate(vocabulary)}
    ids: Dict[str, Any] = {}
    for key, text in SPECIAL_TOKENS.items():
        if text not in index:
            raise AprError(ErrorCode.VALIDATION, "Whisper vocabulary lacks a special token",
                           token=text)
        ids[key] = index[text]
    no_speech = [index[t] for t in NO_SPEECH_TOKENS if t in index]
    ids["no_speech"] = no_speech[0] if no_speech else None
    ids["timestamp_begin"] = ids["no_timestamps"] + 1
    ids["vocab_size"] = len(vocabulary)
    lang_ids = [int(i) for i in ct2_config.get("lang_ids") or []]
    languages = {}
    for token_id in lang_ids:
        token = vocabulary[token_id] if 0 <= token_id < len(vocabulary) else ""
        if not (token.startswith("<|") and token.endswith("|>")):
            raise AprError(ErrorCode.VALIDATION, "language id is not a language token",
                           token_id=token_id)
        languages[token[2:-2]] = token_id
    ids["languages"] = languages
    ids["multilingual"] = len(vocabulary) >= 51865
    ids["suppress_ids"] = [int(i) for i in ct2_config.get("suppress_ids") or []]
    ids["suppress_ids_begin"] = [int(i) for i in ct2_config.get("suppress_ids_begin") or []]
    ids["non_speech_tokens"] = non_speech_tokens(encode)
    if ct2_config.get("alignment_heads"):
        ids["alignment_heads"] = [[int(a), int(b)] for a, b in ct2_config["alignment_heads"]]
    return ids


__all__ = ["SPECIAL_TOKENS", "generation_config", "non_speech_tokens"]
