"""An APR Whisper model as whisper.cpp's ggml model file (`formats.ggml_whisper`).

whisper.cpp fixes each tensor's type by the file type: the weight matrices (and the token
embedding) in `wtype` (F16, Q8_0, Q5_0 ...), the two convolution kernels in F16 (F32 in an
all-F32 file), everything else -- biases, LayerNorms, positional embeddings -- in F32. Its
names are OpenAI's, so the map is the OpenAI column of THE Whisper name table
(`speech.names`): APR's fused projections split into query | key | value rows (self
attention) and key | value rows (cross attention). Whisper has no key bias: the fused
bias's key rows must be zero and are dropped.

A piece whose stored dtype already is its target dtype keeps its bytes (whole rows of a
block type are sliced, never re-quantized), so an APR file quantized by `apr convert
--quantize Q8_0` exports the same Q8_0 blocks; any other piece is dequantized (a
CTranslate2 int8 weight with its `_scale` rows) and encoded in the target dtype.

whisper.cpp derives the special tokens' ids from n_vocab rather than reading them, so the
exporter checks that the model's ids are the ones whisper.cpp will use. The vocabulary
written is the text tokens (ids below <|endoftext|>) as bytes; whisper.cpp names the rest.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..dtypes import DType, by_name
from ..errors import AprError, ErrorCode
from ..formats.ggml_whisper import (FTYPES, GgmlTensor, file_type, write_whisper_ggml)

# The tensors whisper.cpp's loader expects, per layer `{}` (whisper_model_load).
_GLOBAL = ["encoder.positional_embedding", "encoder.conv1.weight", "encoder.conv1.bias",
           "encoder.conv2.weight", "encoder.conv2.bias", "encoder.ln_post.weight",
           "encoder.ln_post.bias", "decoder.positional_embedding",
           "decoder.token_embedding.weight", "decoder.ln.weight", "decoder.ln.bias"]
_BLOCK = ["mlp_ln.weight", "mlp_ln.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
          "mlp.2.bias", "attn_ln.weight", "attn_ln.bias", "attn.query.weight",
          "attn.query.bias", "attn.key.weight", "attn.value.weight", "attn.value.bias",
          "attn.out.weight", "attn.out.bias"]
_CROSS = ["cross_attn_ln.weight", "cross_attn_ln.bias", "cross_attn.query.weight",
          "cross_attn.query.bias", "cross_attn.key.weight", "cross_attn.value.weight",
          "cross_attn.value.bias", "cross_attn.out.weight", "cross_attn.out.bias"]
_CONV = ("encoder.conv1.weight", "encoder.conv2.weight")
_CONV_BIAS = ("encoder.conv1.bias", "encoder.conv2.bias")
DEFAULT_TYPE = "F16"


def whisper_cpp_names(n_audio_layer: int, n_text_layer: int) -> List[str]:
    """Every tensor name whisper.cpp's loader requires."""
    names = list(_GLOBAL)
    for i in range(n_audio_layer):
        names += ["encoder.blocks.{}.{}".format(i, p) for p in _BLOCK]
    for i in range(n_text_layer):
        names += ["decoder.blocks.{}.{}".format(i, p) for p in _BLOCK + _CROSS]
    return names


def special_ids(n_vocab: int) -> Dict[str, int]:
    """The special token ids whisper.cpp derives from n_vocab (whisper_vocab)."""
    multilingual = n_vocab >= 51865
    shift = (n_vocab - 51765 - 1) - 98 if multilingual else 0
    base = 1 if multilingual else 0
    return {"eot": 50256 + base, "sot": 50257 + base, "translate": 50357 + shift,
            "transcribe": 50358 + shift, "sot_prev": 50360 + shift,
            "no_timestamps": 50362 + shift, "timestamp_begin": 50363 + shift}


def _check_specials(generation: Dict[str, Any], n_vocab: int) -> None:
    expected = special_ids(n_vocab)
    wrong = {k: (generation.get(k), v) for k, v in expected.items() if generation.get(k) != v}
    if wrong:
        raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp derives special token ids from "
                       "n_vocab and this model's differ", n_vocab=n_vocab,
                       differing={k: "{} (whisper.cpp {})".format(*v) for k, v in wrong.items()})


def text_tokens(tokenizer_json: Dict[str, Any], eot: int) -> List[bytes]:
    """The byte strings of ids 0 .. eot-1 from a byte-level BPE tokenizer.json."""
    from ..text.bpe import BYTE_TO_UNICODE
    decode = {c: b for b, c in BYTE_TO_UNICODE.items()}
    vocab = (tokenizer_json.get("model") or {}).get("vocab") or {}
    by_id: Dict[int, str] = {int(i): t for t, i in vocab.items() if int(i) < eot}
    if sorted(by_id) != list(range(eot)):
        raise AprError(ErrorCode.VALIDATION, "tokenizer vocabulary does not cover the text "
                       "tokens", expected=eot, found=len(by_id))
    try:
        return [bytes(decode[c] for c in by_id[i]) for i in range(eot)]
    except KeyError as exc:
        raise AprError(ErrorCode.VALIDATION, "token is not byte-level BPE text",
                       character=str(exc))


def default_type(model_file: Any) -> str:
    """The stored dtype of the weight matrices when they share one whisper.cpp file type,
    else F16 (Whisper's own precision)."""
    kinds = {info.dtype.name for name, info in model_file.tensors.items()
             if len(info.shape) == 2 and name.endswith(".weight") and ".blocks." in name}
    kind = kinds.pop() if len(kinds) == 1 else DEFAULT_TYPE
    return kind if kind in FTYPES and kind != "F32" else DEFAULT_TYPE


class _Reader:
    """Pieces (row ranges) of the APR tensors, raw when already in the target dtype."""

    def __init__(self, model_file: Any) -> None:
        self.file = model_file

    def values(self, name: str) -> np.ndarray:
        from ..quant import dequantize
        raw = self.file.read_raw(name)
        values = dequantize(raw.data, raw.dtype, raw.shape)
        if name + "_scale" in self.file.tensors:     # CTranslate2 int8 rows
            scale = self.file.read_raw(name + "_scale")
            rows = dequantize(scale.data, scale.dtype, scale.shape).reshape(-1)
            values = values / (rows[:, None] if rows.size > 1 else rows[0])
        return np.asarray(values, dtype=np.float32)

    def piece(self, name: str, index: int, count: int, target: DType) -> Tuple[bytes, Tuple]:
        info = self.file.tensors[name]
        rows = info.shape[0] // count if info.shape else 0
        shape = (rows,) + tuple(info.shape[1:]) if count > 1 else tuple(info.shape)
        if info.dtype == target and name + "_scale" not in self.file.tensors:
            data = self.file.read_raw(name).data
            step = len(data) // count
            return bytes(memoryview(data)[index * step:(index + 1) * step]), shape
        values = self.values(name).reshape(count, -1)[index].reshape(shape)
        return encode(values, target), shape


def encode(values: np.ndarray, dtype: DType) -> bytes:
    """float32 values in `dtype` (a numpy float type, or a block type's kernel)."""
    if not dtype.quantized:
        return np.ascontiguousarray(values, dtype=np.dtype(dtype.numpy)).tobytes()
    from ..quant import quantize
    return quantize(np.ascontiguousarray(values, dtype=np.float32), dtype)


def _target(name: str, apr_shape: Tuple[int, ...], wtype: DType) -> DType:
    if name in _CONV:
        return by_name("F32") if wtype.name == "F32" else by_name("F16")
    if len(apr_shape) < 2 or name.endswith("positional_embedding"):
        return by_name("F32")
    return wtype


def ggml_tensors(model_file: Any, n_audio_layer: int, n_text_layer: int,
                 wtype: DType) -> Iterator[GgmlTensor]:
    """whisper.cpp's tensors, one at a time, from the APR file's."""
    from ..speech.names import source_name_map
    names = whisper_cpp_names(n_audio_layer, n_text_layer)
    sources = source_name_map(names, "openai")       # APR name -> [whisper.cpp name | None]
    covered = {n for pieces in sources.values() for n in pieces if n}
    if covered != set(names) or any(a not in model_file.tensors for a in sources):
        raise AprError(ErrorCode.VALIDATION, "Whisper model lacks tensors whisper.cpp needs",
                       missing=sorted(set(names) - covered)[:5] +
                       sorted(a for a in sources if a not in model_file.tensors)[:5])
    reader = _Reader(model_file)
    for apr, pieces in sorted(sources.items()):
        shape = tuple(model_file.tensors[apr].shape)
        target = _target(apr, shape, wtype)
        for index, ggml_name in enumerate(pieces):
            if ggml_name is None:
                _check_dropped_zero(reader, apr, index, len(pieces))
                continue
            data, piece_shape = reader.piece(apr, index, len(pieces), target)
            if apr in _CONV_BIAS:
                piece_shape = piece_shape + (1,)
            yield GgmlTensor(ggml_name, target, piece_shape, data)


def _check_dropped_zero(reader: _Reader, name: str, index: int, count: int) -> None:
    values = reader.values(name).reshape(count, -1)[index]
    if np.any(values != 0):
        raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp has no slot for this non-zero "
                       "bias piece", tensor=name, piece=index, max_abs=float(np.abs(values).max()))


def export_whisper_cpp(source: Any, output: Any, dtype_name: Optional[str] = None,
                       overwrite: bool = True) -> Dict[str, Any]:
    """Write `source` (an APR Whisper path, bytes or ModelFile) as a whisper.cpp model file;
    `dtype_name` is the matrices' type (default: `default_type`). Returns a summary."""
    from ..formats.open import open_model
    from ..speech.mel import mel_filters
    model_file = open_model(source) if not hasattr(source, "tensors") else source
    try:
        meta = model_file.metadata
        if meta.get("model_type") != "whisper" or not isinstance(meta.get("whisper"), dict):
            raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp export needs a Whisper model",
                           model_type=meta.get("model_type"))
        config = {k: int(v) for k, v in meta["whisper"].items()}
        if config["n_audio_state"] != config["n_text_state"]:
            raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp needs equal encoder and "
                           "decoder widths", audio=config["n_audio_state"],
                           text=config["n_text_state"])
        generation = dict(meta.get("whisper_generation") or {})
        _check_specials(generation, config["n_vocab"])
        kind = (dtype_name or default_type(model_file)).upper()
        if kind == "F32":
            raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp's CPU convolution needs F16 "
                           "kernels, which an all-F32 file cannot hold: export F16 or a "
                           "quantized type", type=kind)
        hparams = dict(config, ftype=file_type(kind))
        if "mel_filters" in model_file.tensors:
            filters = reader_values(model_file, "mel_filters")
        else:
            filters = mel_filters(config["n_mels"])
        filters = np.ascontiguousarray(filters, dtype="<f4")
        tokens = text_tokens(meta.get("hf_tokenizer") or {}, generation["eot"])
        count = write_whisper_ggml(
            output, hparams, (filters.shape[0], filters.shape[1], filters.tobytes()), tokens,
            ggml_tensors(model_file, config["n_audio_layer"], config["n_text_layer"],
                         by_name(kind)), overwrite=overwrite)
        return {"type": kind, "ftype": hparams["ftype"], "tensors": count,
                "tokens": len(tokens)}
    finally:
        if model_file is not source:
            model_file.close()


def reader_values(model_file: Any, name: str) -> np.ndarray:
    return _Reader(model_file).values(name)


__all__ = ["export_whisper_cpp", "whisper_cpp_names", "special_ids", "text_tokens",
           "default_type", "ggml_tensors"]
