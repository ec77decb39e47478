"""Load a Whisper model from an APR file written by `apr import` (a CTranslate2 directory).

`load_whisper(path | bytes | ByteSource)` returns a `WhisperModel`: the network
(`whisper_net.WhisperNet`, float32 weights), the byte-level BPE tokenizer, the special
token ids and settings (`whisper_generation` metadata) and the mel filter bank. Stored
weights of any dtype are dequantized to float32 once, at load; a CTranslate2 int8 weight
comes with per-row scales (`<name>.weight_scale`) and is restored as `q / scale`. With
`kernels` (a backend's `registry.Kernels`), block-quantized projections stay at their
stored size instead and run on those kernels (`projections`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import AprError, ErrorCode
from .projections import SCALE_SUFFIX, covered, projections
from .whisper_net import WhisperConfig, WhisperNet


class WhisperModel:
    """A loaded Whisper model (see the module docstring)."""

    def __init__(self, config: WhisperConfig, weights: Dict[str, np.ndarray],
                 generation: Dict[str, Any], tokenizer: Any,
                 metadata: Optional[Dict[str, Any]] = None,
                 linears: Optional[Dict[str, Any]] = None) -> None:
        self.config = config
        self.net = WhisperNet(config, weights, linears=linears)
        self.generation = generation
        self.tokenizer = tokenizer
        self.metadata = metadata or {}
        self.mel_filters = weights.get("mel_filters")
        g = generation
        self.eot, self.sot = g["eot"], g["sot"]
        self.sot_prev, self.sot_lm = g["sot_prev"], g["sot_lm"]
        self.no_timestamps, self.timestamp_begin = g["no_timestamps"], g["timestamp_begin"]
        self.transcribe_token, self.translate_token = g["transcribe"], g["translate"]
        self.no_speech = g.get("no_speech")
        self.languages: Dict[str, int] = dict(g.get("languages") or {})
        self.multilingual = bool(g.get("multilingual"))
        self.vocab_size = int(g.get("vocab_size") or config.n_vocab)

    def encode_text(self, text: str) -> List[int]:
        """Text -> token ids (no special tokens)."""
        return self.tokenizer.encode(text, add_special=False, parse_special=False)

    def decode_text(self, ids: List[int]) -> str:
        """Token ids -> text, keeping only text tokens (ids below <|endoftext|>)."""
        return self.tokenizer.decode([i for i in ids if i < self.eot])

    def sot_sequence(self, language: Optional[str], task: str) -> List[int]:
        """<|startoftranscript|> [<|lang|> <|task|>] (the last two for multilingual models)."""
        sequence = [self.sot]
        if self.multilingual:
            if language not in self.languages:
                raise AprError(ErrorCode.ARGUMENT, "unknown language code", language=language,
                               known=", ".join(sorted(self.languages)))
            if task not in ("transcribe", "translate"):
                raise AprError(ErrorCode.ARGUMENT, "task must be transcribe or translate",
                               task=task)
            sequence.append(self.languages[language])
            sequence.append(self.transcribe_token if task == "transcribe"
                            else self.translate_token)
        return sequence


def _weights(model_file: Any, skip: Any = ()) -> Dict[str, np.ndarray]:
    """name -> float32 array for every tensor but `skip` (int8 rows rescaled by their
    `_scale`)."""
    from ..quant import dequantize
    raw = {name: model_file.read_raw(name) for name in model_file.tensors if name not in skip}
    out: Dict[str, np.ndarray] = {}
    for name, tensor in raw.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        values = dequantize(tensor.data, tensor.dtype, tensor.shape)
        scale = raw.get(name + SCALE_SUFFIX)
        if scale is not None:
            rows = dequantize(scale.data, scale.dtype, scale.shape).reshape(-1)
            if values.ndim != 2 or rows.size not in (1, values.shape[0]):
                raise AprError(ErrorCode.VALIDATION, "int8 scale does not match its weight",
                               tensor=name, shape=list(values.shape), scale=rows.size)
            values = values / (rows[:, None] if rows.size > 1 else rows[0])
        out[name] = np.ascontiguousarray(values, dtype=np.float32)
    return out


def load_whisper(path_or_byte_source: Any, verify: bool = True,
                 kernels: Optional[Any] = None, audio_kernels: Optional[Any] = None,
                 plain: bool = False) -> WhisperModel:
    """A Whisper model from an APR file (path, bytes or ByteSource); E009 when the file is
    not a Whisper model. `kernels`: block-quantized projections run on them over their
    stored bytes (see the module docstring); None: every weight float32. `audio_kernels`,
    `plain`: `projections`' `audio` and `plain` (the browser's choices)."""
    from ..formats.open import open_model
    from ..text.load import tokenizer_from_json
    from .names import required_names
    model_file = open_model(path_or_byte_source, verify=verify)
    try:
        meta = model_file.metadata
        if meta.get("model_type") != "whisper" or not isinstance(meta.get("whisper"), dict):
            raise AprError(ErrorCode.UNSUPPORTED, "not a Whisper model",
                           model_type=meta.get("model_type"))
        try:
            config = WhisperConfig(**{k: int(meta["whisper"][k])
                                      for k in WhisperConfig._fields})
        except (KeyError, TypeError, ValueError) as exc:
            raise AprError(ErrorCode.VALIDATION, "Whisper hyperparameters are incomplete",
                           error=str(exc))
        missing = [n for n in required_names(config.n_audio_layer, config.n_text_layer)
                   if n not in model_file.tensors]
        if missing:
            raise AprError(ErrorCode.VALIDATION, "Whisper model lacks tensors",
                           missing=missing[:5], count=len(missing))
        linears = (projections(model_file, kernels, audio_kernels, plain)
                   if kernels is not None else {})
        weights = _weights(model_file, covered(linears))
        tokenizer = tokenizer_from_json(meta["hf_tokenizer"])
        return WhisperModel(config, weights, dict(meta.get("whisper_generation") or {}),
                            tokenizer, meta, linears)
    finally:
        model_file.close()


def is_whisper(metadata: Dict[str, Any]) -> bool:
    """True when APR metadata describes a Whisper model."""
    return metadata.get("model_type") == "whisper"


__all__ = ["WhisperModel", "load_whisper", "is_whisper"]
