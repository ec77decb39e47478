"""A Hugging Face Whisper directory as a model view ready for `convert()` to APR.

The directory holds `config.json` (`model_type` "whisper": heads, sizes),
`model.safetensors` (or shards with `model.safetensors.index.json`), `tokenizer.json`,
and optionally `generation_config.json` (`lang_to_id`, `suppress_tokens`,
`begin_suppress_tokens`, `alignment_heads`) and `preprocessor_config.json`
(`feature_size` = mel bins). The weights go through the one name table's "hf" column
(`conversion.whisper_source`); `proj_out` is the token embedding (Whisper ties them) and
is not stored twice. Without `lang_to_id` the languages are the `<|xx|>` tokens of
`speech.languages` found in the tokenizer.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Tuple

from ..errors import AprError, ErrorCode
from ..json_files import read_json_file
from ..tensor import ModelFile
from ..transforms.view import ModelView

PROJ_OUT = "proj_out.weight"
EMBED_TOKENS = "model.decoder.embed_tokens.weight"


def is_hf_whisper_dir(path: str) -> bool:
    """True for a directory whose config.json says `model_type: whisper`."""
    config_path = os.path.join(path, "config.json")
    if not (os.path.isdir(path) and os.path.isfile(config_path)):
        return False
    try:
        config = read_json_file(config_path, "config")
    except AprError:
        return False
    return isinstance(config, dict) and config.get("model_type") == "whisper"


def _json(directory: str, name: str, required: bool) -> Dict[str, Any]:
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        if required:
            raise AprError(ErrorCode.IO, "Hugging Face Whisper directory lacks " + name,
                           path=directory)
        return {}
    value = read_json_file(path, name)
    if not isinstance(value, dict):
        raise AprError(ErrorCode.FORMAT, name + " is not a JSON object", path=path)
    return value


def generation_settings(generation: Dict[str, Any], tokenizer_json: Dict[str, Any],
                        n_vocab: int) -> Dict[str, Any]:
    """generation_config.json -> the CTranslate2-style settings `generation_config` reads."""
    from ..speech.languages import LANGUAGES
    from .whisper_source import tokenizer_vocabulary
    lang_to_id = generation.get("lang_to_id") or {}
    if lang_to_id:
        lang_ids = sorted(int(i) for i in lang_to_id.values())
    else:
        index = {t: i for i, t in enumerate(tokenizer_vocabulary(tokenizer_json, n_vocab))}
        lang_ids = sorted(index["<|{}|>".format(code)] for code in LANGUAGES
                          if "<|{}|>".format(code) in index) if n_vocab >= 51865 else []
    settings: Dict[str, Any] = {
        "lang_ids": lang_ids,
        "suppress_ids": [int(i) for i in generation.get("suppress_tokens") or []],
        "suppress_ids_begin": [int(i) for i in generation.get("begin_suppress_tokens") or []]}
    if generation.get("alignment_heads"):
        settings["alignment_heads"] = generation["alignment_heads"]
    return settings


def _check_tied(model: ModelFile, config: Dict[str, Any]) -> None:
    """APR's Whisper computes logits with the token embedding: refuse an untied proj_out."""
    if PROJ_OUT not in model.tensors or config.get("tie_word_embeddings", True):
        return
    if model.read_raw(PROJ_OUT).data != model.read_raw(EMBED_TOKENS).data:
        raise AprError(ErrorCode.UNSUPPORTED, "Whisper proj_out differs from the token "
                       "embedding (untied output projection)", tensor=PROJ_OUT)


def hf_whisper_view(directory: str) -> Tuple[ModelView, ModelFile]:
    """(view to write, the open SafeTensors model the view reads; close it afterwards)."""
    from ..formats.open import open_model
    from .whisper_source import whisper_source_view
    config = _json(directory, "config.json", True)
    tokenizer_json = _json(directory, "tokenizer.json", True)
    generation = _json(directory, "generation_config.json", False)
    preprocessor = _json(directory, "preprocessor_config.json", False)
    try:
        heads = (int(config["encoder_attention_heads"]), int(config["decoder_attention_heads"]))
        n_vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AprError(ErrorCode.VALIDATION, "Whisper config.json is incomplete",
                       error=str(exc))
    model = open_model(directory)
    try:
        _check_tied(model, config)
        settings = generation_settings(generation, tokenizer_json, n_vocab)
        view = whisper_source_view(model, "hf", heads, tokenizer_json, settings,
                                   {"source_format": "safetensors", "hf_config": config})
        n_mels = view.metadata["whisper"]["n_mels"]
        feature_size = preprocessor.get("feature_size", n_mels)
        if int(feature_size) != n_mels:
            raise AprError(ErrorCode.VALIDATION, "preprocessor feature_size differs from the "
                           "model's mel bins", feature_size=feature_size, n_mels=n_mels)
        return view, model
    except BaseException:
        model.close()
        raise


__all__ = ["is_hf_whisper_dir", "hf_whisper_view", "generation_settings"]
