"""Building a tokenizer: THE factory table from a vocabulary's model type to the class
that implements it. The implementations (bpe, spm) know nothing of this module.

    tokenizer = tokenizer_from_gguf(model_file.metadata)     # tokenizer.ggml.* keys
    tokenizer = tokenizer_from_json("model_dir")              # HF tokenizer.json (+ config)
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from ..errors import AprError, ErrorCode
from ..json_files import read_json_file
from .tokenizer import Tokenizer


def _bpe() -> Any:
    from .bpe import BPETokenizer
    return BPETokenizer


def _spm() -> Any:
    from .spm import SPMTokenizer
    return SPMTokenizer


# GGUF `tokenizer.ggml.model` -> the class (imported on first use).
GGUF_MODELS: Dict[str, Callable[[], Any]] = {"gpt2": _bpe, "gemma4": _bpe, "llama": _spm}
# tokenizer.json `model.type` -> the class.
HF_MODELS: Dict[str, Callable[[], Any]] = {"BPE": _bpe}

_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError)


def tokenizer_from_gguf(kv: Dict[str, Any]) -> Tokenizer:
    """The tokenizer a GGUF file describes in its `tokenizer.ggml.*` keys."""
    model = kv.get("tokenizer.ggml.model")
    if model is None:
        raise AprError(ErrorCode.NOT_FOUND, "GGUF metadata has no tokenizer.ggml.model")
    make = GGUF_MODELS.get(model) if isinstance(model, str) else None
    if make is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unsupported tokenizer model type", model=model,
                       supported=", ".join(sorted(GGUF_MODELS)))
    try:
        return make().from_gguf(kv)
    except _MALFORMED as exc:
        raise AprError(ErrorCode.FORMAT, "malformed GGUF tokenizer metadata",
                       model=model, error=repr(exc)[:200]) from exc


def tokenizer_from_json(path_or_dict: Any,
                        tokenizer_config: Optional[Dict[str, Any]] = None) -> Tokenizer:
    """A HF `tokenizer.json` (path, directory holding it, or parsed dict).

    `tokenizer_config` (tokenizer_config.json) may override BOS/EOS ids and policy and
    supplies the chat template; for a path it is read from beside the file if present.
    """
    data = path_or_dict
    if not isinstance(data, dict):
        path = os.fspath(data)
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        data = read_json_file(path, "tokenizer file")
        config_path = os.path.join(os.path.dirname(path), "tokenizer_config.json")
        if tokenizer_config is None and os.path.isfile(config_path):
            tokenizer_config = read_json_file(config_path, "tokenizer file")
    model = data.get("model")
    kind = model.get("type") if isinstance(model, dict) else None
    if kind is None and isinstance(model, dict) and "merges" in model:
        kind = "BPE"        # old files leave the type out
    make = HF_MODELS.get(kind) if isinstance(kind, str) else None
    if make is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unsupported tokenizer.json model type",
                       model=kind, supported=", ".join(sorted(HF_MODELS)))
    try:
        return make().from_hf(data, tokenizer_config or {})
    except _MALFORMED as exc:
        raise AprError(ErrorCode.FORMAT, "malformed tokenizer.json",
                       error=repr(exc)[:200]) from exc


__all__ = ["tokenizer_from_gguf", "tokenizer_from_json", "GGUF_MODELS", "HF_MODELS"]
