"""THE Whisper tensor-name table: source layouts -> APR Whisper names.

APR names follow OpenAI's checkpoint (`encoder.blocks.0.attn_ln.weight`, ...) except that
fused projections stay fused as CTranslate2 stores them: `attn.qkv` ([3d, d], q|k|v rows)
and `cross_attn.kv` ([2d, d], k|v rows). Each row is (CTranslate2 regex, APR template,
Hugging Face source, OpenAI source): the regex's groups fill the APR template and the
other columns' templates alike, so a Hugging Face name (`model.encoder.layers.0.fc1.weight`)
or an OpenAI one (`encoder.blocks.0.mlp.0.weight`) maps through the same row. A source
entry that is a tuple lists the pieces a fused APR tensor is made of, in row order
(q, k, v); a CTranslate2 int8 model's per-row scales (`..._scale`) map alongside their
weights.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..errors import AprError, ErrorCode

_BLOCK = r"(en|de)coder/layer_(\d+)/"
_LINEAR = r"/(weight|bias|weight_scale)$"
_HF = "model.{0}coder.layers.{1}."
_OA = "{0}coder.blocks.{1}."
Source = Union[str, Tuple[str, ...]]

WHISPER_NAMES: List[Tuple[str, str, Source, Source]] = [
    (r"^encoder/conv([12])/(weight|bias)$", "encoder.conv{0}.{1}",
     "model.encoder.conv{0}.{1}", "encoder.conv{0}.{1}"),
    (r"^encoder/position_encodings/encodings$", "encoder.positional_embedding",
     "model.encoder.embed_positions.weight", "encoder.positional_embedding"),
    (r"^encoder/layer_norm/gamma$", "encoder.ln_post.weight",
     "model.encoder.layer_norm.weight", "encoder.ln_post.weight"),
    (r"^encoder/layer_norm/beta$", "encoder.ln_post.bias",
     "model.encoder.layer_norm.bias", "encoder.ln_post.bias"),
    (r"^decoder/embeddings/(weight|weight_scale)$", "decoder.token_embedding.{0}",
     "model.decoder.embed_tokens.{0}", "decoder.token_embedding.{0}"),
    (r"^decoder/position_encodings/encodings$", "decoder.positional_embedding",
     "model.decoder.embed_positions.weight", "decoder.positional_embedding"),
    (r"^decoder/layer_norm/gamma$", "decoder.ln.weight",
     "model.decoder.layer_norm.weight", "decoder.ln.weight"),
    (r"^decoder/layer_norm/beta$", "decoder.ln.bias",
     "model.decoder.layer_norm.bias", "decoder.ln.bias"),
    ("^" + _BLOCK + r"self_attention/layer_norm/gamma$", "{0}coder.blocks.{1}.attn_ln.weight",
     _HF + "self_attn_layer_norm.weight", _OA + "attn_ln.weight"),
    ("^" + _BLOCK + r"self_attention/layer_norm/beta$", "{0}coder.blocks.{1}.attn_ln.bias",
     _HF + "self_attn_layer_norm.bias", _OA + "attn_ln.bias"),
    ("^" + _BLOCK + "self_attention/linear_0" + _LINEAR, "{0}coder.blocks.{1}.attn.qkv.{2}",
     (_HF + "self_attn.q_proj.{2}", _HF + "self_attn.k_proj.{2}", _HF + "self_attn.v_proj.{2}"),
     (_OA + "attn.query.{2}", _OA + "attn.key.{2}", _OA + "attn.value.{2}")),
    ("^" + _BLOCK + "self_attention/linear_1" + _LINEAR, "{0}coder.blocks.{1}.attn.out.{2}",
     _HF + "self_attn.out_proj.{2}", _OA + "attn.out.{2}"),
    ("^" + _BLOCK + r"attention/layer_norm/gamma$", "{0}coder.blocks.{1}.cross_attn_ln.weight",
     _HF + "encoder_attn_layer_norm.weight", _OA + "cross_attn_ln.weight"),
    ("^" + _BLOCK + r"attention/layer_norm/beta$", "{0}coder.blocks.{1}.cross_attn_ln.bias",
     _HF + "encoder_attn_layer_norm.bias", _OA + "cross_attn_ln.bias"),
    ("^" + _BLOCK + "attention/linear_0" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.query.{2}",
     _HF + "encoder_attn.q_proj.{2}", _OA + "cross_attn.query.{2}"),
    ("^" + _BLOCK + "attention/linear_1" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.kv.{2}",
     (_HF + "encoder_attn.k_proj.{2}", _HF + "encoder_attn.v_proj.{2}"),
     (_OA + "cross_attn.key.{2}", _OA + "cross_attn.value.{2}")),
    ("^" + _BLOCK + "attention/linear_2" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.out.{2}",
     _HF + "encoder_attn.out_proj.{2}", _OA + "cross_attn.out.{2}"),
    ("^" + _BLOCK + r"ffn/layer_norm/gamma$", "{0}coder.blocks.{1}.mlp_ln.weight",
     _HF + "final_layer_norm.weight", _OA + "mlp_ln.weight"),
    ("^" + _BLOCK + r"ffn/layer_norm/beta$", "{0}coder.blocks.{1}.mlp_ln.bias",
     _HF + "final_layer_norm.bias", _OA + "mlp_ln.bias"),
    ("^" + _BLOCK + "ffn/linear_0" + _LINEAR, "{0}coder.blocks.{1}.mlp.fc1.{2}",
     _HF + "fc1.{2}", _OA + "mlp.0.{2}"),
    ("^" + _BLOCK + "ffn/linear_1" + _LINEAR, "{0}coder.blocks.{1}.mlp.fc2.{2}",
     _HF + "fc2.{2}", _OA + "mlp.2.{2}"),
]
COLUMNS = {"hf": 2, "openai": 3}
_COMPILED = [(re.compile(row[0]), row[1]) for row in WHISPER_NAMES]
_GROUP = re.compile(r"\((?!\?)[^()]*\)")          # a capturing group without nesting


def apr_name(ct2_name: str) -> Optional[str]:
    """The APR name of a CTranslate2 Whisper variable; None for the spec's scalars and
    anything else the table does not list."""
    for pattern, template in _COMPILED:
        found = pattern.match(ct2_name)
        if found:
            return template.format(*found.groups())
    return None


def _source_patterns(column: str) -> List[Tuple["re.Pattern[str]", str, int, int]]:
    """(regex over source names, APR template, piece index, piece count) per source
    template of `column`; the groups are the CTranslate2 regex's, in the same order."""
    out = []
    for row in WHISPER_NAMES:
        groups = _GROUP.findall(row[0])
        pieces: Sequence[str] = row[COLUMNS[column]] if isinstance(
            row[COLUMNS[column]], tuple) else (row[COLUMNS[column]],)
        for index, template in enumerate(pieces):
            literal = re.split(r"(\{\d\})", template)
            regex = "".join(groups[int(p[1])] if re.match(r"^\{\d\}$", p) else re.escape(p)
                            for p in literal)
            out.append((re.compile("^" + regex + "$"), row[1], index, len(pieces)))
    return out


def source_name_map(names: List[str], column: str) -> Dict[str, List[Optional[str]]]:
    """{APR name: [source name or None per piece]} for the `column` ("hf" or "openai")
    names among `names`; a fused APR tensor lists its pieces in row order (None where
    the source lacks one, e.g. Hugging Face's k_proj has no bias)."""
    patterns = _source_patterns(column)
    out: Dict[str, List[Optional[str]]] = {}
    for name in names:
        for pattern, template, index, count in patterns:
            found = pattern.match(name)
            if found:
                out.setdefault(template.format(*found.groups()), [None] * count)[index] = name
                break
    return out


def layer_count(names: List[str], prefix: str) -> int:
    """Number of blocks `prefix.blocks.N.` among APR names (N contiguous from 0)."""
    found = {int(m.group(1)) for m in (re.match(re.escape(prefix) + r"\.blocks\.(\d+)\.", n)
                                       for n in names) if m}
    if found != set(range(len(found))):
        raise AprError(ErrorCode.VALIDATION, "Whisper blocks are not numbered 0..N-1",
                       part=prefix, blocks=sorted(found)[:8])
    return len(found)


def required_names(n_audio_layer: int, n_text_layer: int) -> List[str]:
    """Every tensor a float Whisper model must have (biases of k rows are fused in)."""
    names = ["encoder.conv1.weight", "encoder.conv1.bias", "encoder.conv2.weight",
             "encoder.conv2.bias", "encoder.positional_embedding", "encoder.ln_post.weight",
             "encoder.ln_post.bias", "decoder.token_embedding.weight",
             "decoder.positional_embedding", "decoder.ln.weight", "decoder.ln.bias"]
    parts = ["attn_ln", "attn.qkv", "attn.out", "mlp_ln", "mlp.fc1", "mlp.fc2"]
    for i in range(n_audio_layer):
        names += ["encoder.blocks.{}.{}.{}".format(i, p, s) for p in parts
                  for s in ("weight", "bias")]
    parts += ["cross_attn_ln", "cross_attn.query", "cross_attn.kv", "cross_attn.out"]
    for i in range(n_text_layer):
        names += ["decoder.blocks.{}.{}.{}".format(i, p, s) for p in parts
                  for s in ("weight", "bias")]
    return names


def ct2_name_map(names: List[str]) -> Dict[str, str]:
    """{CTranslate2 name: APR name} for every mapped variable."""
    out = {}
    for name in names:
        mapped = apr_name(name)
        if mapped is not None:
            out[name] = mapped
    return out


__all__ = ["WHISPER_NAMES", "COLUMNS", "apr_name", "source_name_map", "ct2_name_map",
           "layer_count", "required_names"]
