"""A Whisper checkpoint in Hugging Face or OpenAI naming as a model view for `convert()`.

`whisper_source_view(model, column, heads, tokenizer_json, settings, meta)` renames the
weights of an open checkpoint (`model`: any ModelFile -- SafeTensors for a Hugging Face
directory, the safe PyTorch reader for an OpenAI `.pt`) to the APR Whisper names through
the one name table (`speech.names`, column "hf" or "openai"). Separate projections are
fused the way APR stores them: q|k|v rows into `attn.qkv`, k|v into `cross_attn.kv`;
a missing piece (both sources have no k bias) is zeros. Fusing is a byte concatenation
(row-major pieces stacked on axis 0), so every dtype stays as stored. The view adds the
mel filter bank and the metadata a CTranslate2 import writes (`whisper`,
`whisper_generation`, `hf_tokenizer`), so `speech.model.load_whisper` reads either.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import AprError, ErrorCode
from ..tensor import LazyTensor, ModelFile
from ..transforms.view import ModelView, derived


def tokenizer_vocabulary(tokenizer_json: Dict[str, Any], size: int) -> List[str]:
    """Token text per id (0..size-1) from tokenizer.json: the BPE vocabulary and the added
    tokens; ids past both are Whisper's timestamp tokens (`<|0.00|>` .. in 0.02 s steps
    after `<|notimestamps|>`), which Hugging Face tokenizer files may leave out."""
    texts: Dict[int, str] = {}
    for text, token_id in ((tokenizer_json.get("model") or {}).get("vocab") or {}).items():
        texts[int(token_id)] = text
    for added in tokenizer_json.get("added_tokens") or []:
        texts[int(added["id"])] = added["content"]
    inverse = {text: i for i, text in texts.items()}
    first_stamp = inverse.get("<|notimestamps|>", size - 1) + 1
    return [texts.get(i, "<|{:.2f}|>".format((i - first_stamp) * 0.02)) for i in range(size)]


def _fused(name: str, pieces: Sequence[Optional[str]], model: ModelFile) -> LazyTensor:
    """One APR tensor from its source pieces stacked on axis 0 (None -> zeros)."""
    present = [model.info(p) for p in pieces if p is not None]
    dtype, shape = present[0].dtype, tuple(present[0].shape)
    if any(i.dtype != dtype or tuple(i.shape) != shape for i in present):
        raise AprError(ErrorCode.VALIDATION, "fused Whisper projections differ in dtype or "
                       "shape", tensor=name, pieces=[p for p in pieces if p])
    if len(pieces) == 1:
        return LazyTensor(name, dtype, shape, model.lazy(pieces[0]).loader)
    size = present[0].nbytes

    def load() -> bytes:
        return b"".join(model.read_raw(p).data if p is not None else bytes(size)
                        for p in pieces)
    return LazyTensor(name, dtype, (shape[0] * len(pieces),) + shape[1:], load)


def _dimensions(tensors: Dict[str, LazyTensor], heads: Tuple[int, int]) -> Dict[str, int]:
    from ..speech.names import layer_count
    try:
        conv1 = tensors["encoder.conv1.weight"].shape                  # [d, n_mels, 3]
        embedding = tensors["decoder.token_embedding.weight"].shape    # [n_vocab, d]
        return {"n_mels": int(conv1[1]), "n_audio_state": int(conv1[0]),
                "n_audio_ctx": int(tensors["encoder.positional_embedding"].shape[0]),
                "n_audio_head": int(heads[0]),
                "n_audio_layer": layer_count(list(tensors), "encoder"),
                "n_vocab": int(embedding[0]), "n_text_state": int(embedding[1]),
                "n_text_ctx": int(tensors["decoder.positional_embedding"].shape[0]),
                "n_text_head": int(heads[1]),
                "n_text_layer": layer_count(list(tensors), "decoder")}
    except KeyError as exc:
        raise AprError(ErrorCode.VALIDATION, "Whisper checkpoint lacks a tensor",
                       missing=str(exc))


def whisper_source_view(model: ModelFile, column: str, heads: Tuple[int, int],
                        tokenizer_json: Dict[str, Any], settings: Dict[str, Any],
                        meta: Dict[str, Any]) -> ModelView:
    """The APR view of `model` (see the module docstring). `heads` = (encoder, decoder)
    attention heads; `settings` = CTranslate2-style generation settings (`lang_ids`,
    `suppress_ids`, `suppress_ids_begin`, `alignment_heads`); `meta` is merged into the
    metadata (source format, provenance)."""
    from ..speech.generation import generation_config
    from ..speech.mel import mel_filters
    from ..speech.names import required_names, source_name_map
    from ..text.load import tokenizer_from_json
    mapped = source_name_map(list(model.tensors), column)
    tensors = {apr: _fused(apr, pieces, model) for apr, pieces in sorted(mapped.items())}
    config = _dimensions(tensors, heads)
    missing = sorted(set(required_names(config["n_audio_layer"], config["n_text_layer"]))
                     - set(tensors))
    if missing:
        raise AprError(ErrorCode.VALIDATION, "Whisper checkpoint lacks tensors",
                       missing=missing[:5], count=len(missing))
    if config["n_audio_state"] != config["n_text_state"]:
        raise AprError(ErrorCode.UNSUPPORTED, "Whisper encoder and decoder widths differ",
                       encoder=config["n_audio_state"], decoder=config["n_text_state"])
    tokenizer = tokenizer_from_json(tokenizer_json)
    vocabulary = tokenizer_vocabulary(tokenizer_json, config["n_vocab"])
    generation = generation_config(
        vocabulary, settings, lambda text: tokenizer.encode(text, add_special=False))
    n_mels = config["n_mels"]
    views = list(tensors.values())
    views.append(derived("mel_filters", "F32", (n_mels, 201), lambda: mel_filters(n_mels)))
    metadata: Dict[str, Any] = dict(meta)
    metadata.update({"model_type": "whisper", "whisper": config,
                     "whisper_generation": generation, "hf_tokenizer": tokenizer_json})
    return ModelView(metadata, views)


__all__ = ["whisper_source_view", "tokenizer_vocabulary"]
