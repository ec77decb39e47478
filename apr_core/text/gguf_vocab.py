"""A Hugging Face `tokenizer.json` written as GGUF `tokenizer.ggml.*` keys (what llama.cpp
reads), for byte-level BPE vocabularies (GPT-2, LLaMA-3, Qwen2, SmolLM, GPT-4o style).

Tokens, token types, merges and special ids come from the same reading of tokenizer.json
the runtime uses (`hf_json.hf_settings`), so a GGUF export tokenizes exactly as the source
directory does. The pre-tokenizer is *identified by behaviour*, the way llama.cpp's
converter does it: the directory's word split of a probe text is compared with each
`tokenizer.ggml.pre` family llama.cpp knows, and the first family that splits it
identically (and agrees on `ignore_merges`) names it. No match is an error, not a guess.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..errors import AprError, ErrorCode
from .hf_json import hf_settings
from .pretokenize import GGUF_PRE, PRE_PATTERNS, PreTokenizer
from .tokenizer import (ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_UNUSED,
                        ATTR_USER_DEFINED)

# Mixed scripts, digit runs, contractions, whitespace runs and emoji: each known family
# splits this text differently (compare llama.cpp's convert_hf_to_gguf `chktxt`).
PROBE_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? "
    "'Ve 'M 'LL 'D We'Ve a'll \u3000 ¿Qué? ٣٤٥ x²+y³ αβγ\r\n\r\nend")

# GGUF token type for a token's attribute bits, first match wins (the inverse of
# tokenizer.TYPE_TO_ATTR; lstrip/rstrip bits have no GGUF type).
ATTR_TO_TYPE = ((ATTR_CONTROL, 3), (ATTR_USER_DEFINED, 4), (ATTR_UNKNOWN, 2), (ATTR_UNUSED, 5),
                (ATTR_BYTE, 6), (ATTR_NORMAL, 1))

KV_TYPES = {
    "tokenizer.ggml.model": "str", "tokenizer.ggml.pre": "str",
    "tokenizer.ggml.tokens": ["arr", "str"], "tokenizer.ggml.token_type": ["arr", "i32"],
    "tokenizer.ggml.merges": ["arr", "str"],
    "tokenizer.ggml.bos_token_id": "u32", "tokenizer.ggml.eos_token_id": "u32",
    "tokenizer.ggml.unknown_token_id": "u32", "tokenizer.ggml.padding_token_id": "u32",
    "tokenizer.ggml.add_bos_token": "bool", "tokenizer.ggml.add_eos_token": "bool",
    "tokenizer.chat_template": "str",
}


def gguf_pre_name(settings: Dict[str, Any]) -> str:
    """The `tokenizer.ggml.pre` name whose word split equals the directory's."""
    want = settings["pre"].split(PROBE_TEXT)
    for name, (family, ignore_merges, _) in GGUF_PRE.items():
        if ignore_merges != settings["ignore_merges"]:
            continue
        if PreTokenizer.family(family).split(PROBE_TEXT) == want:
            return name
    raise AprError(ErrorCode.UNSUPPORTED, "tokenizer.json's pre-tokenizer matches no "
                   "llama.cpp pre-tokenizer type", families=", ".join(sorted(PRE_PATTERNS)))


def _token_type(attr: int) -> int:
    for bits, gguf_type in ATTR_TO_TYPE:
        if attr & bits:
            return gguf_type
    return 1


def tokenizer_kv(tokenizer_json: Dict[str, Any], tokenizer_config: Optional[Dict[str, Any]],
                 n_vocab: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(kv, kv_types) describing the tokenizer for llama.cpp; `n_vocab` is the model's
    embedding row count (the token list is padded to it with unused `[PAD{i}]` tokens, as
    llama.cpp's converter does, because llama.cpp sizes the vocabulary from this list)."""
    settings = hf_settings(tokenizer_json, tokenizer_config or {})
    if not settings["byte_encode"]:
        raise AprError(ErrorCode.UNSUPPORTED, "GGUF export handles byte-level BPE tokenizers "
                       "only (SentencePiece-style tokenizer.json is not supported)")
    tokens: List[str] = list(settings["tokens"])
    types = [_token_type(a) for a in settings["attrs"]]
    if len(tokens) > n_vocab:
        raise AprError(ErrorCode.VALIDATION, "tokenizer has more tokens than the model has "
                       "embedding rows", tokens=len(tokens), n_vocab=n_vocab)
    for index in range(len(tokens), n_vocab):
        tokens.append("[PAD{}]".format(index))
        types.append(5)
    merges = [m if isinstance(m, str) else " ".join(m) for m in settings["merges"]]
    kv: Dict[str, Any] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": gguf_pre_name(settings),
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }
    for key, name in (("bos_token_id", "bos_id"), ("eos_token_id", "eos_id"),
                      ("unknown_token_id", "unk_id"), ("padding_token_id", "pad_id")):
        if settings.get(name) is not None:
            kv["tokenizer.ggml." + key] = int(settings[name])
    kv["tokenizer.ggml.add_bos_token"] = bool(settings["add_bos"])
    kv["tokenizer.ggml.add_eos_token"] = bool(settings["add_eos"])
    if settings.get("chat_template"):
        kv["tokenizer.chat_template"] = settings["chat_template"]
    return kv, {key: KV_TYPES[key] for key in kv}


__all__ = ["tokenizer_kv", "gguf_pre_name", "PROBE_TEXT"]
