"""A CTranslate2 Whisper directory as a model view ready for `convert()` to APR.

The directory holds `model.bin` (CTranslate2's binary, `formats.ctranslate2`),
`config.json` (CTranslate2's generation settings: language ids, suppressed tokens,
alignment heads), `vocabulary.txt` or `vocabulary.json` (token texts, with the timestamp
tokens) and `tokenizer.json` (the byte-level BPE). The view renames the weights to the APR
Whisper names (`speech.names`), keeps every payload in its stored dtype (float16 stays
float16, int8 weights keep their `_scale` rows), adds the Slaney mel filter bank the front
end uses (`mel_filters`, computed), and puts the hyperparameters (`whisper`), the
generation block (`whisper_generation`) and the tokenizer (`hf_tokenizer`) in metadata.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

from ..errors import AprError, ErrorCode
from ..formats.ctranslate2 import CT2File, read_ctranslate2
from ..json_files import read_json_file
from ..tensor import LazyTensor
from ..transforms.view import ModelView, derived

WHISPER_SPEC = "WhisperSpec"


def is_ctranslate2_dir(path: str) -> bool:
    """True for a directory holding a CTranslate2 `model.bin`."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.bin"))


def read_vocabulary(directory: str) -> List[str]:
    """CTranslate2's vocabulary: vocabulary.json (a list) or vocabulary.txt (one a line)."""
    json_path = os.path.join(directory, "vocabulary.json")
    if os.path.isfile(json_path):
        tokens = read_json_file(json_path, "vocabulary")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise AprError(ErrorCode.FORMAT, "vocabulary.json is not a list of strings",
                           path=json_path)
        return tokens
    text_path = os.path.join(directory, "vocabulary.txt")
    if not os.path.isfile(text_path):
        raise AprError(ErrorCode.IO, "CTranslate2 directory has no vocabulary.txt or "
                       "vocabulary.json", path=directory)
    with open(text_path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _config(ct2: CT2File, names: Dict[str, str]) -> Dict[str, int]:
    from ..speech.names import layer_count
    shapes = {apr: ct2.info(src).shape for src, apr in names.items()}
    scalars = ct2.scalars()
    try:
        conv1 = shapes["encoder.conv1.weight"]
        embedding = shapes["decoder.token_embedding.weight"]
        config = {
            "n_mels": conv1[1], "n_audio_state": conv1[0],
            "n_audio_ctx": shapes["encoder.positional_embedding"][0],
            "n_audio_head": int(scalars["encoder/num_heads"]),
            "n_audio_layer": layer_count(list(shapes), "encoder"),
            "n_vocab": embedding[0], "n_text_state": embedding[1],
            "n_text_ctx": shapes["decoder.positional_embedding"][0],
            "n_text_head": int(scalars["decoder/num_heads"]),
            "n_text_layer": layer_count(list(shapes), "decoder")}
    except (KeyError, IndexError) as exc:
        raise AprError(ErrorCode.VALIDATION, "CTranslate2 Whisper model lacks a variable",
                       missing=str(exc))
    return {k: int(v) for k, v in config.items()}


def whisper_view(directory: str) -> Tuple[ModelView, CT2File]:
    """(view to write, the open CT2 file the view's loaders read; close it afterwards)."""
    from ..speech.generation import generation_config
    from ..speech.mel import mel_filters
    from ..speech.names import ct2_name_map, required_names
    from ..text.load import tokenizer_from_json
    ct2 = read_ctranslate2(os.path.join(directory, "model.bin"))
    try:
        spec = ct2.metadata.get("spec")
        if spec != WHISPER_SPEC:
            raise AprError(ErrorCode.UNSUPPORTED, "only CTranslate2 Whisper models are "
                           "imported", spec=spec)
        names = ct2_name_map(list(ct2.tensors))
        config = _config(ct2, names)
        missing = sorted(set(required_names(config["n_audio_layer"], config["n_text_layer"]))
                         - set(names.values()))
        if missing:
            raise AprError(ErrorCode.VALIDATION, "CTranslate2 Whisper model lacks tensors",
                           missing=missing[:5], count=len(missing))
        tokenizer_json = read_json_file(os.path.join(directory, "tokenizer.json"),
                                        "tokenizer file")
        tokenizer = tokenizer_from_json(tokenizer_json)
        ct2_config_path = os.path.join(directory, "config.json")
        ct2_config = read_json_file(ct2_config_path, "config") \
            if os.path.isfile(ct2_config_path) else {}
        vocabulary = read_vocabulary(directory)
        if len(vocabulary) != config["n_vocab"]:
            raise AprError(ErrorCode.VALIDATION, "vocabulary size differs from the embedding",
                           vocabulary=len(vocabulary), n_vocab=config["n_vocab"])
        generation = generation_config(
            vocabulary, ct2_config, lambda text: tokenizer.encode(text, add_special=False))
        tensors = [LazyTensor(apr, ct2.info(src).dtype, ct2.info(src).shape,
                              _loader(ct2, src)) for src, apr in sorted(names.items())]
        n_mels = config["n_mels"]
        tensors.append(derived("mel_filters", "F32", (n_mels, 201),
                               lambda: mel_filters(n_mels)))
        meta: Dict[str, Any] = {
            "model_type": "whisper", "whisper": config, "whisper_generation": generation,
            "hf_tokenizer": tokenizer_json, "source_format": "ctranslate2",
            "ctranslate2": {"binary_version": ct2.metadata["binary_version"], "spec": spec,
                            "spec_revision": ct2.metadata["spec_revision"]}}
        return ModelView(meta, tensors), ct2
    except BaseException:
        ct2.close()
        raise


def _loader(ct2: CT2File, name: str) -> Any:
    return lambda: ct2.read_raw(name).data


__all__ = ["is_ctranslate2_dir", "whisper_view", "read_vocabulary"]
