"""LoRA adapters applied at run time over a model's (quantized) projections.

    adapters = [(read_adapter("peft-dir/"), 1.0), (read_adapter("style.gguf"), 0.5)]
    adapted = apply_adapters(transformer, adapters)
    adapted.lora.set_scales([1.0, 0.0])          # the second adapter off, no reload

For each adapted projection `y = W x + sum_i scale_i * scaling_i * B_i (A_i x)`: `W` keeps
its stored bytes and its backend's kernel (no re-quantization), the low-rank term is two
small float32 matmuls added after it. An `AdaptedLinear` stands where the Linear stood in
its block; it exposes no stored weight of its own (`data` and `weight` None), so a backend's
fused kernels that read weights directly (numba's one-call layer, its gate/up kernel) find
none and call `matmul`, while `weights.matmul_group` runs the bases of a group (q/k/v,
gate/up) as one kernel call and then adds each term.

Adapter names are the base model's in the adapter's scheme (PEFT: transformers names,
llama.cpp: GGUF names), mapped to block roles through the family's name table
(`apr_core.name_maps`). A PEFT adapter on a LLaMA GGUF gets its Q/K `B` rows permuted as
llama.cpp's converter permuted the base's. Every adapter is checked whole before a new
model is returned; the given Transformer is never changed.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from ..formats.lora import LoraAdapter, LoraPair
from ..name_maps import DECODER_APR, name_map
from ..quant import dequantize
from .families import Family, contracts
from .gguf_export import ROTATED_ROLES, rope_interleave
from .weights import Linear

# Block roles a LoRA may adapt; q/k/v also land in a fused qkv projection.
TARGET_ROLES = ("q", "k", "v", "o", "gate", "up", "down", "qkv")
_APR_ROLE = {re.compile("^" + re.escape(DECODER_APR[r]).replace(r"\{i\}", r"(\d+)") + "$"): r
             for r in TARGET_ROLES}


class LoraSet:
    """The adapters of a model and their scales (one list every AdaptedLinear reads, so
    `set_scales` switches them all at once)."""

    def __init__(self, paths: Sequence[str], scales: Sequence[float]) -> None:
        self.paths = list(paths)
        self.scales = [float(s) for s in scales]
        self.startup = tuple(self.scales)     # the scales it was loaded with

    def set_scales(self, scales: Sequence[float]) -> None:
        if len(scales) != len(self.paths):
            raise AprError(ErrorCode.ARGUMENT, "one scale per loaded adapter",
                           adapters=len(self.paths), scales=len(scales))
        self.scales[:] = [float(s) for s in scales]


class LoraTerm:
    """One adapter's `scaling * B A` on rows `first ..` of a projection's output."""

    def __init__(self, adapter: int, first: int, a: np.ndarray, b: np.ndarray,
                 scaling: float) -> None:
        self.adapter = adapter
        self.first = first
        self.a = a                  # [r, in] float32
        self.b = b                  # [rows, r] float32
        self.scaling = scaling

    def delta(self) -> np.ndarray:
        """`scaling * B A` -> `[rows, in]` float32 (for merging)."""
        return (self.b @ self.a) * np.float32(self.scaling)


class AdaptedLinear:
    """A Linear plus low-rank terms; `matmul` as Linear's, the terms added after."""

    data = None      # no stored weight for kernels to read directly: they call matmul
    weight = None

    def __init__(self, base: Linear, terms: List[LoraTerm], lora: LoraSet) -> None:
        self.base = base
        self.terms = terms
        self.lora = lora
        self.name, self.shape, self.dtype = base.name, base.shape, base.dtype
        self.bias, self.kernels = base.bias, base.kernels

    @property
    def quantized_in_memory(self) -> bool:
        return self.base.quantized_in_memory

    @property
    def nbytes(self) -> int:
        return self.base.nbytes + sum(t.a.nbytes + t.b.nbytes for t in self.terms)

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """`x [T, in]` -> `[T, out]`: the base's product plus the active terms."""
        return self.add_low_rank(x, self.base.matmul(x))

    def add_low_rank(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """`y [T, out]` (the base's product of `x [T, in]`) plus each term, in place."""
        x = np.asarray(x, np.float32)
        for term in self.terms:
            scale = self.lora.scales[term.adapter]
            if scale == 0.0:
                continue
            low = (x @ term.a.T) @ term.b.T                       # [T, r] -> [T, rows]
            rows = slice(term.first, term.first + term.b.shape[0])
            y[:, rows] += low * np.float32(scale * term.scaling)
        return y

    def merged(self) -> np.ndarray:
        """The base weight with every term at its current scale -> `[out, in]` float32."""
        base = self.base
        w = base.weight if base.weight is not None else dequantize(
            base.data, base.dtype, base.shape)
        w = np.array(w, np.float32)                                   # [out, in], a copy
        for term in self.terms:
            scale = self.lora.scales[term.adapter]
            if scale != 0.0:
                w[term.first:term.first + term.b.shape[0]] += term.delta() * np.float32(scale)
        return w

    def __repr__(self) -> str:
        return "<AdaptedLinear {} +{} LoRA terms>".format(self.base.name, len(self.terms))


def apply_adapters(transformer: Any, adapters: Sequence[Tuple[LoraAdapter, float]]
                   ) -> Any:
    """A shallow copy of `transformer` whose targeted projections are AdaptedLinears
    (weights shared), with `.lora` the LoraSet. AprError (nothing changed) when an adapter
    names a tensor the model lacks, does not fit its shape, or targets an unsupported role."""
    if getattr(transformer, "device", None) is not None:
        raise AprError(ErrorCode.UNSUPPORTED, "LoRA adapters run on CPU backends, not on a "
                       "device backend (webgpu)")
    lora = LoraSet([a.path for a, _ in adapters], [s for _, s in adapters])
    terms: Dict[Tuple[int, str], List[LoraTerm]] = {}
    for index, (adapter, _scale) in enumerate(adapters):
        for pair in adapter.pairs:
            layer, role, term = _term(transformer, adapter, index, pair)
            terms.setdefault((layer, role), []).append(term)
    out = copy.copy(transformer)
    out.blocks = []
    for block in transformer.blocks:
        mine = {role: t for (layer, role), t in terms.items() if layer == block.index}
        if mine:
            block = copy.copy(block)
            block.linears = dict(block.linears)
            for role, role_terms in mine.items():
                block.linears[role] = AdaptedLinear(block.linears[role], role_terms, lora)
        out.blocks.append(block)
    out.lora = lora
    return out


def _term(transformer: Any, adapter: LoraAdapter, index: int, pair: LoraPair
          ) -> Tuple[int, str, LoraTerm]:
    """(layer, role of the base projection, its term) for one adapted weight."""
    cfg = transformer.config
    family = Family(cfg.arch, contracts()[cfg.arch])
    gguf_archs = family.contract.get("architectures", {}).get("gguf", [])
    if adapter.arch is not None and adapter.arch not in gguf_archs:
        raise AprError(ErrorCode.VALIDATION, "the LoRA was made for another architecture "
                       "(as llama.cpp, refused)", adapter=adapter.path,
                       adapter_arch=adapter.arch, model_family=cfg.arch)
    apr = name_map(cfg.arch).translate([pair.target], adapter.source, "apr")[pair.target]
    hit = [(int(m.group(1)), role) for pattern, role in _APR_ROLE.items()
           for m in [pattern.match(apr)] if m]
    if not hit:
        raise AprError(ErrorCode.UNSUPPORTED, "LoRA on this tensor is not supported "
                       "(projections only)", tensor=pair.target, roles=list(TARGET_ROLES))
    layer, role = hit[0]
    if not 0 <= layer < len(transformer.blocks):
        raise AprError(ErrorCode.NOT_FOUND, "the adapter targets a layer the model lacks",
                       tensor=pair.target, layer=layer, n_layers=len(transformer.blocks))
    linears = transformer.blocks[layer].linears
    first, rows = 0, None
    if linears.get(role) is None and role in ("q", "k", "v") and linears.get("qkv") is not None:
        first = {"q": 0, "k": cfg.q_dim, "v": cfg.q_dim + cfg.kv_dim}[role]
        rows = cfg.q_dim if role == "q" else cfg.kv_dim
        role = "qkv"
    base = linears.get(role)
    if base is None:
        raise AprError(ErrorCode.NOT_FOUND, "the adapter targets a projection the model "
                       "lacks", tensor=pair.target, role=role)
    base = getattr(base, "base", base)
    rows = base.shape[0] if rows is None else rows
    a = np.asarray(dequantize(pair.a.data, pair.a.dtype, pair.a.shape), np.float32)  # [r, in]
    b = np.asarray(dequantize(pair.b.data, pair.b.dtype, pair.b.shape), np.float32)  # [out, r]
    if a.shape[1] != base.shape[1] or b.shape[0] != rows:
        raise AprError(ErrorCode.VALIDATION, "the LoRA does not fit the base projection",
                       tensor=pair.target, a_shape=a.shape, b_shape=b.shape,
                       base_shape=base.shape, rows=rows)
    b = _relaid_rows(b, pair.target, role, adapter.source, cfg, family)
    return layer, role, LoraTerm(index, first, np.ascontiguousarray(a),
                                 np.ascontiguousarray(b), pair.scaling)


def _relaid_rows(b: np.ndarray, target: str, role: str, source: str, cfg: Any,
                 family: Family) -> np.ndarray:
    """B's output rows in the base's order: Q/K of a family whose GGUF rotary layout
    differs from its HF one (LLaMA) are permuted as llama.cpp's converter did the base's."""
    heads = ROTATED_ROLES.get(role)
    if not heads or source == cfg.source or \
            family.rope_style("hf") == family.rope_style("gguf"):
        return b
    if source != "hf" or cfg.rope_dim != cfg.head_dim:
        raise AprError(ErrorCode.UNSUPPORTED, "this adapter's Q/K rows cannot be laid out "
                       "for this base (GGUF LoRA on a transformers-layout model)",
                       tensor=target, adapter_source=source, base_source=cfg.source)
    return np.ascontiguousarray(rope_interleave(b, int(getattr(cfg, heads))))


def lora_of(transformer: Any) -> Optional[LoraSet]:
    """The LoraSet of an adapted Transformer, None for a plain one."""
    return getattr(transformer, "lora", None)


__all__ = ["apply_adapters", "AdaptedLinear", "LoraSet", "LoraTerm", "lora_of",
           "TARGET_ROLES"]
