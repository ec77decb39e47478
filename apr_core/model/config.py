"""ModelConfig: every hyperparameter the runtime needs, from GGUF, HF config.json or APR.

The hyperparameter table (`apr_core.hparams`) turns each source's keys into canonical
names (`GGUF_KEYS`, `HF_KEYS`, `APR_KEYS` are its columns); `_build` then fills the rest from the family contract (activation, norm,
RoPE convention per source) and checks the algebraic invariants of seed 004 §16 (positive
dims, GQA divisibility, even RoPE dims, sane eps and theta) so that a bad file fails
here with AprError(VALIDATION) instead of deep inside a matmul.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .. import hparams
from ..errors import AprError, ErrorCode
from ..formats.gguf_lazy import GGUFArray
from .families import Family, detect_source, family_for

# Canonical name -> keys per source (first present wins), from THE table (apr_core.hparams).
GGUF_KEYS = hparams.keys("gguf")    # suffixes after "<arch>."
HF_KEYS = hparams.keys("hf")        # config.json (first present and not null)
APR_KEYS = hparams.keys("apr")      # APR metadata "architecture"

# Activation names in the wild -> ours. HF "gelu" is the exact erf GELU; "gelu_new" and
# "gelu_pytorch_tanh" are the tanh approximation.
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
# Contract constraint values -> ModelConfig values.
NORMS = {"rmsnorm": "rms", "layernorm": "layer"}
MLPS = {"swiglu": "gated", "geglu": "gated", "gelu": "plain"}
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling: "none", "linear" (positions / factor), "llama3" or "yarn"
    (layers.rope_inv_freq; YaRN also scales cos and sin by `attention_factor`)."""

    kind: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_ctx: int = 8192
    beta_fast: float = 32.0           # YaRN: rotations above which a pair extrapolates
    beta_slow: float = 1.0            # YaRN: rotations below which it interpolates
    attention_factor: float = 1.0     # YaRN: cos/sin multiplier (0.1 ln(factor) + 1)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: 0.1 * mscale * ln(factor) + 1 (1 when not stretched)."""
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of a decoder-only transformer (one instance per loaded model)."""

    arch: str                      # family name (contract)
    source: str                    # tensor naming scheme: "gguf" or "hf"
    n_vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    norm: str = "rms"              # "rms" | "layer"
    norm_eps: float = 1e-5
    norm_weight_offset: float = 0.0  # added to stored norm weights (HF Gemma: 1.0)
    act: str = "silu"              # "silu" | "gelu" | "gelu_tanh"
    mlp: str = "gated"             # "gated" (down(act(gate) * up)) | "plain" (down(act(up)))
    positions: str = "rope"        # "rope" | "learned"
    rope_theta: float = 10000.0
    rope_theta_local: Optional[float] = None   # sliding-window layers' theta (Gemma 3)
    rope_dim: int = 0
    rope_style: str = "neox"       # "neox" (half split) | "interleaved" (adjacent pairs)
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_ctx: int = 2048
    qkv_bias: bool = False
    tied_embeddings: bool = False
    fused_qkv: bool = False
    qk_norm: bool = False
    sandwich_norm: bool = False
    embed_scale: float = 1.0
    attn_scale: float = 0.0        # 0 -> 1 / sqrt(head_dim)
    sliding_window: Optional[int] = None
    layer_types: Tuple[str, ...] = ()  # "full" | "sliding" per layer

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def dims(self) -> Dict[str, int]:
        """The names contract shapes are written with."""
        return {"n_vocab": self.n_vocab, "d_model": self.d_model, "head_dim": self.head_dim,
                "d_ff": self.d_ff, "q_dim": self.q_dim, "kv_dim": self.kv_dim,
                "qkv_dim": self.q_dim + 2 * self.kv_dim, "max_ctx": self.max_ctx,
                "rope_half": self.rope_dim // 2, "n_heads": self.n_heads,
                "n_kv_heads": self.n_kv_heads}

    def flags(self) -> Dict[str, bool]:
        return {"qkv_bias": self.qkv_bias, "tied_embeddings": self.tied_embeddings}


def _extract(table: Any, lookup: Any) -> Dict[str, Any]:
    raw: Dict[str, Any] = {}
    for name, keys in table:
        for key in keys:
            value = lookup(key)
            if value is not None:
                raw[name] = value
                break
    return raw


def config_from_gguf(kv: Dict[str, Any], tensor_names: Any) -> ModelConfig:
    """From GGUF KV pairs (a GGUF file's metadata, or an APR file's metadata["gguf"]["kv"])."""
    arch = str(kv.get("general.architecture", ""))
    raw = _extract(GGUF_KEYS, lambda key: kv.get("{}.{}".format(arch, key)))
    if "n_vocab" not in raw and isinstance(kv.get("tokenizer.ggml.tokens"), (list, GGUFArray)):
        raw["n_vocab"] = len(kv["tokenizer.ggml.tokens"])
    kind = str(raw.pop("rope_scaling_type", "none"))
    factor = raw.pop("rope_scaling_factor", None)
    if kind == "none" and factor not in (None, 0, 1, 0.0, 1.0):
        kind = "linear"   # older files carry only rope.scale_linear
    raw["rope_scaling"] = {"rope_type": kind, "factor": factor or 1.0}
    for name, key in (("rope_scaling_orig_ctx", "original_max_position_embeddings"),
                      ("rope_yarn_beta_fast", "beta_fast"),
                      ("rope_yarn_beta_slow", "beta_slow")):
        if raw.get(name) is not None:
            raw["rope_scaling"][key] = raw.pop(name)
        raw.pop(name, None)

    family = family_for(arch, "gguf")
    source = detect_source(tensor_names, family)
    _from_gguf_tensors(raw, tensor_names)
    if family.constraints.get("sliding_window_pattern") is None:
        raw.pop("sliding_window", None)   # llama.cpp applies SWA only to such families
    return _build(raw, family, source)


def config_from_hf(cfg: Dict[str, Any], tensor_names: Any) -> ModelConfig:
    """From a transformers config.json dict (v4 or v5 layout)."""
    raw = _extract(HF_KEYS, cfg.get)
    family = family_for(str(cfg.get("model_type", "")), "hf")
    params = raw.pop("rope_parameters", None)
    if isinstance(params, dict):
        per_type = {LAYER_TYPES[k]: v for k, v in params.items() if k in LAYER_TYPES}
        full = per_type.get("full", params)
        if full.get("rope_theta") is not None:
            raw.setdefault("rope_theta", full["rope_theta"])
        raw["rope_scaling"] = full
        if "sliding" in per_type:
            raw["rope_theta_local"] = per_type["sliding"].get("rope_theta")
    raw.setdefault("tied_embeddings", True)   # transformers' PretrainedConfig default
    if raw.pop("use_sliding_window", True) is False:
        raw.pop("sliding_window", None)
    if "query_pre_attn_scalar" in raw:
        raw["attn_scale"] = float(raw.pop("query_pre_attn_scalar")) ** -0.5
    factor = raw.pop("partial_rotary_factor", None)
    if factor is not None and "d_model" in raw and raw.get("n_heads"):
        head_dim = raw.get("head_dim") or int(raw["d_model"]) // int(raw["n_heads"])
        raw["rope_dim"] = int(head_dim * float(factor))
    return _build(raw, family, detect_source(tensor_names, family))


def config_from_apr(meta: Dict[str, Any], tensor_names: Any) -> ModelConfig:
    """From APR metadata: the GGUF table when it carries "gguf", HF's for "hf_config",
    else the APR "architecture" table."""
    block = meta.get("gguf")
    if isinstance(block, dict) and isinstance(block.get("kv"), dict):
        return config_from_gguf(block["kv"], tensor_names)
    if isinstance(meta.get("hf_config"), dict):
        return config_from_hf(meta["hf_config"], tensor_names)
    arch = meta.get("architecture") or {}
    raw = _extract(APR_KEYS, arch.get)
    model_type = str(meta.get("model_type", ""))
    try:
        family = family_for(model_type, "hf")
    except AprError:
        family = family_for(model_type, "gguf")
    source = detect_source(tensor_names, family)
    if source == "gguf":
        _from_gguf_tensors(raw, tensor_names)
    return _build(raw, family, source)


def _from_gguf_tensors(raw: Dict[str, Any], tensor_names: Any) -> None:
    """GGUF states some options only by which tensors exist: tied embeddings by leaving
    out `output.weight`, attention biases (a LLaMA with attention_bias) by having them."""
    raw["tied_embeddings"] = "output.weight" not in tensor_names
    if "blk.0.attn_q.bias" in tensor_names:
        raw["qkv_bias"] = True


def _rope_scaling(spec: Any, max_ctx: int = 8192) -> RopeScaling:
    if not isinstance(spec, dict):
        return RopeScaling()
    kind = str(spec.get("rope_type", spec.get("type", "default")))
    if kind in ("default", "none"):
        return RopeScaling()
    if kind == "linear":
        return RopeScaling("linear", float(spec.get("factor", 1.0)))
    if kind == "llama3":
        return RopeScaling("llama3", float(spec["factor"]), float(spec["low_freq_factor"]),
                           float(spec["high_freq_factor"]),
                           int(spec["original_max_position_embeddings"]))
    if kind == "yarn":
        factor = float(spec.get("factor", 1.0))
        attention = spec.get("attention_factor")
        if attention is None:
            mscale, all_dim = spec.get("mscale"), spec.get("mscale_all_dim")
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim) \
                if mscale and all_dim else yarn_mscale(factor)
        return RopeScaling("yarn", factor,
                           original_max_ctx=int(spec.get("original_max_position_embeddings")
                                                or max_ctx),
                           beta_fast=float(spec.get("beta_fast") or 32.0),
                           beta_slow=float(spec.get("beta_slow") or 1.0),
                           attention_factor=float(attention))
    raise AprError(ErrorCode.UNSUPPORTED, "unsupported RoPE scaling type", rope_type=kind)


def _layer_types(raw: Dict[str, Any], family: Family, n_layers: int) -> Tuple[str, ...]:
    window = raw.get("sliding_window")
    types = raw.get("layer_types")
    if isinstance(types, list):
        if len(types) != n_layers or any(t not in LAYER_TYPES for t in types):
            raise AprError(ErrorCode.VALIDATION, "layer_types does not match the layers",
                           layer_types=types, n_layers=n_layers)
        return tuple(LAYER_TYPES[t] for t in types)
    if not window:
        return ("full",) * n_layers
    pattern = raw.get("swa_pattern", family.constraints.get("sliding_window_pattern"))
    if isinstance(pattern, list):      # GGUF: one bool per layer, true = sliding
        return tuple("sliding" if p else "full" for p in pattern[:n_layers])
    if pattern:
        # Every `pattern`-th layer is global (Gemma 3: 5 local layers, then 1 global).
        return tuple("full" if (i + 1) % int(pattern) == 0 else "sliding"
                     for i in range(n_layers))
    return ("sliding",) * n_layers


def _build(raw: Dict[str, Any], family: Family, source: str) -> ModelConfig:
    for key in ("n_vocab", "d_model", "n_layers", "n_heads"):
        if key not in raw:
            raise AprError(ErrorCode.NOT_FOUND, "model metadata lacks a required hyperparameter",
                           key=key, family=family.name, source=source)
    c = family.constraints
    n_heads = int(raw["n_heads"])
    head_dim = int(raw.get("head_dim") or int(raw["d_model"]) // max(n_heads, 1))
    positions = str(c.get("positions", "rope"))
    act = str(raw.get("act", c.get("activation", "silu")))
    if act not in ACTIVATIONS or ACTIVATIONS[act] != c.get("activation", ACTIVATIONS.get(act)):
        raise AprError(ErrorCode.VALIDATION, "activation does not match the family contract",
                       activation=act, family=family.name, expected=c.get("activation"))
    window = raw.get("sliding_window")
    n_layers = int(raw["n_layers"])
    config = ModelConfig(
        arch=family.name, source=source, n_vocab=int(raw["n_vocab"]),
        d_model=int(raw["d_model"]), n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=int(raw.get("n_kv_heads") or n_heads), head_dim=head_dim,
        d_ff=int(raw.get("d_ff") or 4 * int(raw["d_model"])),
        norm=NORMS[c.get("norm_type", "rmsnorm")],
        norm_eps=float(raw.get("norm_eps", 1e-5)),
        norm_weight_offset=family.norm_weight_offset(source),
        act=ACTIVATIONS[act], mlp=MLPS[c.get("mlp_type", "swiglu")], positions=positions,
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rope_theta_local=(float(raw.get("rope_theta_local") or c["rope_theta_local"])
                          if "rope_theta_local" in c else None),
        rope_dim=int(raw.get("rope_dim") or head_dim) if positions == "rope" else 0,
        rope_style=family.rope_style(source), rope_scaling=_rope_scaling(raw.get("rope_scaling"),
                                                                  int(raw.get("max_ctx", 2048))),
        max_ctx=int(raw.get("max_ctx", 2048)),
        qkv_bias=bool(raw.get("qkv_bias", c.get("qkv_bias", False))),
        tied_embeddings=bool(raw.get("tied_embeddings", False)),
        fused_qkv="qkv" in family.contract["tensors"]["layer"],
        qk_norm="q_norm" in family.contract["tensors"]["layer"],
        sandwich_norm="post_ffn_norm" in family.contract["tensors"]["layer"],
        embed_scale=math.sqrt(int(raw["d_model"]))
        if c.get("embedding_scale") == "sqrt_d_model" else 1.0,
        attn_scale=float(raw.get("attn_scale", 0.0)),
        sliding_window=int(window) if window else None,
        layer_types=_layer_types(raw, family, n_layers))
    validate_config(config)
    return config


def validate_config(cfg: ModelConfig) -> None:
    """Seed 004 §16 invariants; AprError(VALIDATION) naming the first one that fails."""
    def need(ok: bool, rule: str) -> None:
        if not ok:
            raise AprError(ErrorCode.VALIDATION, "model config violates an invariant",
                           rule=rule, family=cfg.arch)
    for name in ("n_vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                 "d_ff", "max_ctx"):
        need(getattr(cfg, name) > 0, "{} > 0".format(name))
    need(cfg.n_kv_heads <= cfg.n_heads, "n_kv_heads <= n_heads")
    need(cfg.n_heads % cfg.n_kv_heads == 0, "n_heads % n_kv_heads == 0")
    need(0.0 < cfg.norm_eps < 1.0, "0 < norm_eps < 1")
    need(len(cfg.layer_types) == cfg.n_layers, "one layer type per layer")
    need(cfg.sliding_window is None or cfg.sliding_window > 0, "sliding_window > 0")
    if cfg.positions == "rope":
        need(cfg.rope_dim % 2 == 0 and 0 < cfg.rope_dim <= cfg.head_dim,
             "rope_dim even and <= head_dim")
        need(math.isfinite(cfg.rope_theta) and cfg.rope_theta > 0, "rope_theta finite > 0")
        need(cfg.rope_style in ("neox", "interleaved"), "rope_style neox|interleaved")


__all__ = ["ModelConfig", "RopeScaling", "config_from_gguf", "config_from_hf",
           "config_from_apr", "validate_config", "GGUF_KEYS", "HF_KEYS", "APR_KEYS"]
