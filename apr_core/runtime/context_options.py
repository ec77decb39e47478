"""Context length and RoPE overrides (llama.cpp's `-c`, `--rope-scaling`, `--rope-freq-base`,
`--rope-freq-scale`, `--yarn-*`), applied to a loaded model.

    changes = apply_context(transformer, ContextOptions(ctx=8192, rope_scaling="yarn",
                                                        rope_scale=4.0, yarn_orig_ctx=2048))

Unset fields keep what the model file says. The model's context becomes `ctx` (the KV
memory it needs grows with it); RoPE scaling "linear" divides positions by the factor
(`rope_scale`, or 1 / `rope_freq_scale`), "yarn" stretches the original context
(`yarn_orig_ctx`, default the model's trained context) by the factor with YaRN's
frequency ramp and attention factor, "none" turns the file's scaling off. `kv_type`
(llama.cpp's `--cache-type-k/-v`, one type for both) is the storage of the KV cache the
model's new caches and the engine's block pool use (apr_core.model.kv_types).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..errors import AprError, ErrorCode
from ..model import kv_types
from ..model.config import RopeScaling, yarn_mscale

SCALINGS = ("none", "linear", "yarn")


@dataclass(frozen=True)
class ContextOptions:
    ctx: Optional[int] = None                 # context length (tokens)
    rope_scaling: Optional[str] = None        # none | linear | yarn
    rope_freq_base: Optional[float] = None    # RoPE theta
    rope_scale: Optional[float] = None        # the scaling factor
    rope_freq_scale: Optional[float] = None   # 1 / factor (llama.cpp's other spelling)
    yarn_orig_ctx: Optional[int] = None       # YaRN: the context the model was trained on
    yarn_beta_fast: Optional[float] = None
    yarn_beta_slow: Optional[float] = None
    yarn_attn_factor: Optional[float] = None  # YaRN: cos/sin multiplier (default derived)
    kv_type: Optional[str] = None             # KV cache storage: f32 | f16 | q8_0 | q4_0

    def __post_init__(self) -> None:
        positive = [v for v in (self.ctx, self.rope_freq_base, self.rope_scale,
                                self.rope_freq_scale, self.yarn_orig_ctx, self.yarn_beta_fast,
                                self.yarn_beta_slow, self.yarn_attn_factor) if v is not None]
        if any(v <= 0 for v in positive) or (
                self.rope_scaling is not None and self.rope_scaling not in SCALINGS):
            raise AprError(ErrorCode.ARGUMENT, "context or RoPE option out of range",
                           options=repr(self), scalings=", ".join(SCALINGS))
        if self.kv_type is not None and self.kv_type not in kv_types.NAMES:
            raise AprError(ErrorCode.ARGUMENT, "unknown KV cache type", kv_type=self.kv_type,
                           choices=", ".join(kv_types.NAMES))

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self))


def scaling_for(current: RopeScaling, trained_ctx: int, o: ContextOptions) -> RopeScaling:
    """The RoPE scaling `o` asks for on top of the model's `current` one."""
    kind = o.rope_scaling or current.kind
    factor = o.rope_scale or (1.0 / o.rope_freq_scale if o.rope_freq_scale else None)
    if kind == "none":
        return RopeScaling()
    if kind == "linear":
        return RopeScaling("linear", factor or current.factor)
    if kind == "yarn":
        factor = factor or (current.factor if current.kind == "yarn" else 1.0)
        base = current if current.kind == "yarn" else RopeScaling(
            "yarn", original_max_ctx=trained_ctx)
        return dataclasses.replace(
            base, factor=factor,
            original_max_ctx=o.yarn_orig_ctx or base.original_max_ctx,
            beta_fast=o.yarn_beta_fast or base.beta_fast,
            beta_slow=o.yarn_beta_slow or base.beta_slow,
            attention_factor=o.yarn_attn_factor or yarn_mscale(factor))
    if kind == "llama3" and factor is None:
        return current                       # the file's own LLaMA-3 parameters
    raise AprError(ErrorCode.UNSUPPORTED, "this RoPE scaling cannot be overridden",
                   rope_scaling=kind)


def apply_context(transformer: Any, o: ContextOptions) -> Dict[str, Any]:
    """Reconfigure `transformer` as `o` asks; the changes made (field -> new value)."""
    if o.empty:
        return {}
    cfg = transformer.config
    changes: Dict[str, Any] = {}
    if o.kv_type:
        transformer.kv_type = kv_types.get(o.kv_type, cfg.head_dim).name
    if o.ctx:
        changes["max_ctx"] = int(o.ctx)
    if cfg.positions == "rope":
        if o.rope_freq_base:
            changes["rope_theta"] = float(o.rope_freq_base)
        if any(v is not None for v in (o.rope_scaling, o.rope_scale, o.rope_freq_scale,
                                       o.yarn_orig_ctx, o.yarn_beta_fast, o.yarn_beta_slow,
                                       o.yarn_attn_factor)):
            changes["rope_scaling"] = scaling_for(cfg.rope_scaling, cfg.max_ctx, o)
    elif o.ctx and o.ctx > cfg.max_ctx:
        raise AprError(ErrorCode.ARGUMENT, "learned position embeddings end at the model's "
                       "context", ctx=o.ctx, context=cfg.max_ctx)
    if changes:
        transformer.reconfigure(**changes)
    return changes


__all__ = ["ContextOptions", "apply_context", "scaling_for", "SCALINGS"]
