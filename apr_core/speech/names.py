"""THE Whisper tensor-name table: source layouts -> APR Whisper names.

APR names follow OpenAI's checkpoint (`encoder.blocks.0.attn_ln.weight`, ...) except that
fused projections stay fused as CTranslate2 stores them: `attn.qkv` ([3d, d], q|k|v rows)
and `cross_attn.kv` ([2d, d], k|v rows). Each row is (source regex, APR template); a
CTranslate2 int8 model's per-row scales (`..._scale`) map alongside their weights.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from ..errors import AprError, ErrorCode

_BLOCK = r"(en|de)coder/layer_(\d+)/"
_LINEAR = r"/(weight|bias|weight_scale)$"

CT2_NAMES: List[Tuple[str, str]] = [
    (r"^encoder/conv([12])/(weight|bias)$", "encoder.conv{0}.{1}"),
    (r"^encoder/position_encodings/encodings$", "encoder.positional_embedding"),
    (r"^encoder/layer_norm/gamma$", "encoder.ln_post.weight"),
    (r"^encoder/layer_norm/beta$", "encoder.ln_post.bias"),
    (r"^decoder/embeddings/(weight|weight_scale)$", "decoder.token_embedding.{0}"),
    (r"^decoder/position_encodings/encodings$", "decoder.positional_embedding"),
    (r"^decoder/layer_norm/gamma$", "decoder.ln.weight"),
    (r"^decoder/layer_norm/beta$", "decoder.ln.bias"),
    ("^" + _BLOCK + r"self_attention/layer_norm/gamma$", "{0}coder.blocks.{1}.attn_ln.weight"),
    ("^" + _BLOCK + r"self_attention/layer_norm/beta$", "{0}coder.blocks.{1}.attn_ln.bias"),
    ("^" + _BLOCK + "self_attention/linear_0" + _LINEAR, "{0}coder.blocks.{1}.attn.qkv.{2}"),
    ("^" + _BLOCK + "self_attention/linear_1" + _LINEAR, "{0}coder.blocks.{1}.attn.out.{2}"),
    ("^" + _BLOCK + r"attention/layer_norm/gamma$", "{0}coder.blocks.{1}.cross_attn_ln.weight"),
    ("^" + _BLOCK + r"attention/layer_norm/beta$", "{0}coder.blocks.{1}.cross_attn_ln.bias"),
    ("^" + _BLOCK + "attention/linear_0" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.query.{2}"),
    ("^" + _BLOCK + "attention/linear_1" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.kv.{2}"),
    ("^" + _BLOCK + "attention/linear_2" + _LINEAR, "{0}coder.blocks.{1}.cross_attn.out.{2}"),
    ("^" + _BLOCK + r"ffn/layer_norm/gamma$", "{0}coder.blocks.{1}.mlp_ln.weight"),
    ("^" + _BLOCK + r"ffn/layer_norm/beta$", "{0}coder.blocks.{1}.mlp_ln.bias"),
    ("^" + _BLOCK + "ffn/linear_0" + _LINEAR, "{0}coder.blocks.{1}.mlp.fc1.{2}"),
    ("^" + _BLOCK + "ffn/linear_1" + _LINEAR, "{0}coder.blocks.{1}.mlp.fc2.{2}"),
]
_COMPILED = [(re.compile(pattern), template) for pattern, template in CT2_NAMES]


def apr_name(ct2_name: str) -> Optional[str]:
    """The APR name of a CTranslate2 Whisper variable; None for the spec's scalars and
    anything else the table does not list."""
    for pattern, template in _COMPILED:
        found = pattern.match(ct2_name)
        if found:
            return template.format(*found.groups())
    return None


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


__all__ = ["CT2_NAMES", "apr_name", "ct2_name_map", "layer_count", "required_names"]
