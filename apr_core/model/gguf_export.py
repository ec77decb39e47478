"""A Hugging Face model laid out the way llama.cpp expects it in a GGUF file.

Everything comes from the family contract (`contracts/*.yaml`), so no family has its own
code path here:

- the GGUF architecture name (`architectures.gguf`) and each role's HF and GGUF tensor name;
- the RoPE convention of each source: when HF rotates half-split pairs ("neox") and the
  family's GGUFs rotate adjacent pairs ("interleaved", LLaMA/Mistral), the rows of Q and K
  (and their biases) are permuted head by head, as llama.cpp's converter does;
- the norm-weight offset per source (HF Gemma stores w, GGUF stores w + 1);
- `hf_transposed` roles (GPT-2's Conv1D weights are stored [in, out]) are transposed;
- LLaMA 3.1 RoPE scaling, which llama.cpp reads as per-frequency divisors, becomes the
  contract's `rope_freqs` tensor.

Hyperparameters are written from the checked `ModelConfig` under the GGUF key suffixes of
`apr_core.hparams`; the tokenizer keys come from `text.gguf_vocab`. 1-D tensors are stored
as F32 (llama.cpp's converter does the same: its norm kernels expect F32).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from .. import dtypes, hparams
from ..errors import AprError, ErrorCode
from ..tensor import LazyTensor
from .config import ModelConfig, config_from_hf
from .families import Family, family_for, resolve_tensors

# Canonical hyperparameter -> GGUF value type (apr_core.hparams' gguf_type column).
HPARAM_TYPES = tuple((h.field, h.gguf_type) for h in hparams.HPARAMS if h.gguf_type)
_EPS = next(h.gguf for h in hparams.HPARAMS if h.field == "norm_eps")
NORM_EPS_KEYS = {"rms": _EPS[0], "layer": _EPS[1]}      # which eps key per norm kind
# Roles whose rows are RoPE-rotated, and the head count that splits them.
ROTATED_ROLES = {"q": "n_heads", "k": "n_kv_heads", "q_bias": "n_heads", "k_bias": "n_kv_heads"}
# RoPE scalings llama.cpp reads as a `rope_freqs` tensor of per-frequency divisors, not
# as keys (LLaMA 3.1's wavelength-dependent scaling).
SCALING_AS_TENSOR = ("llama3",)
# HF tensors that are buffers, not weights (llama.cpp's converter skips them too).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def gguf_arch(family: Family) -> str:
    names = family.contract.get("architectures", {}).get("gguf") or []
    if not names:
        raise AprError(ErrorCode.UNSUPPORTED, "family has no GGUF architecture", family=family.name)
    return str(names[0])


def hparam_kv(config: ModelConfig, arch: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(kv, types) for the model's hyperparameters under `<arch>.`."""
    kv: Dict[str, Any] = {}
    types: Dict[str, Any] = {}

    def put(suffix: str, value: Any, kind: str) -> None:
        key = "{}.{}".format(arch, suffix)
        kv[key], types[key] = value, kind

    for name, kind in HPARAM_TYPES:
        put(hparams.gguf_suffix(name), int(getattr(config, name)), kind)
    put(NORM_EPS_KEYS[config.norm], float(config.norm_eps), "f32")
    if config.head_dim != config.d_model // config.n_heads:
        put(hparams.gguf_suffix("head_dim"), config.head_dim, "u32")
        put("attention.value_length", config.head_dim, "u32")
    if config.positions == "rope":
        put(hparams.gguf_suffix("rope_theta"), float(config.rope_theta), "f32")
        put(hparams.gguf_suffix("rope_dim"), int(config.rope_dim), "u32")
        scaling = config.rope_scaling
        if scaling.kind in ("linear", "yarn"):
            put(hparams.gguf_suffix("rope_scaling_type"), scaling.kind, "str")
            put(hparams.gguf_suffix("rope_scaling_factor"), float(scaling.factor), "f32")
        if scaling.kind == "yarn":          # the attention factor is derived from the factor
            put(hparams.gguf_suffix("rope_scaling_orig_ctx"), int(scaling.original_max_ctx),
                "u32")
            put(hparams.gguf_suffix("rope_yarn_beta_fast"), float(scaling.beta_fast), "f32")
            put(hparams.gguf_suffix("rope_yarn_beta_slow"), float(scaling.beta_slow), "f32")
        elif scaling.kind != "linear" and scaling.kind not in SCALING_AS_TENSOR + ("none",):
            raise AprError(ErrorCode.UNSUPPORTED, "GGUF export of this RoPE scaling is not "
                           "supported", rope_scaling=scaling.kind)
    if config.sliding_window:
        put(hparams.gguf_suffix("sliding_window"), int(config.sliding_window), "u32")
    return kv, types


def _element_array(tensor: LazyTensor) -> Any:
    """The tensor's elements as unsigned integers of their width (layout moves only)."""
    import numpy as np
    if tensor.dtype.quantized:
        raise AprError(ErrorCode.UNSUPPORTED, "cannot re-layout a block-quantized HF tensor for "
                       "GGUF (convert from float weights)", tensor=tensor.name,
                       dtype=tensor.dtype.name)
    width = tensor.dtype.type_size
    return np.frombuffer(tensor.load(), dtype="<u{}".format(width)).reshape(tensor.shape)


def _as_float32(tensor: LazyTensor) -> Any:
    from ..quant import dequantize
    return dequantize(tensor.load(), tensor.dtype, tensor.shape).astype("<f4")


def rope_interleave(rows: Any, n_heads: int) -> Any:
    """HF half-split rotary rows -> GGUF adjacent pairs, per head (llama.cpp's permute)."""
    shape = rows.shape
    # [n_heads * head_dim, ...] -> [n_heads, 2, head_dim/2, ...] -> swap halves and pairs
    return (rows.reshape((n_heads, 2, shape[0] // n_heads // 2) + shape[1:])
            .swapaxes(1, 2).reshape(shape))


def _relaid(tensor: LazyTensor, name: str, shape: Tuple[int, ...],
            move: Callable[[Any], Any]) -> LazyTensor:
    def load() -> bytes:
        return move(_element_array(tensor)).tobytes()
    return LazyTensor(name, tensor.dtype, shape, load)


def _float32(tensor: LazyTensor, name: str, offset: float) -> LazyTensor:
    def load() -> bytes:
        values = _as_float32(tensor)
        return (values + offset if offset else values).astype("<f4").tobytes()
    return LazyTensor(name, dtypes.BY_NAME["F32"], tensor.shape, load)


def _gguf_tensor(tensor: LazyTensor, gguf_name: str, role: str, transposed: bool,
                 config: ModelConfig, family: Family) -> LazyTensor:
    if len(tensor.shape) <= 1:
        offset = 0.0
        if role.endswith("norm"):
            offset = family.norm_weight_offset("hf") - family.norm_weight_offset("gguf")
        moved = _float32(tensor, gguf_name, offset)
    else:
        moved = LazyTensor(gguf_name, tensor.dtype, tensor.shape, tensor.loader)
    if transposed:
        moved = _relaid(moved, gguf_name, tuple(moved.shape[::-1]), lambda a: a.T.copy())
    heads = ROTATED_ROLES.get(role)
    if heads and family.rope_style("hf") != family.rope_style("gguf"):
        if family.rope_style("gguf") != "interleaved" or config.rope_dim != config.head_dim:
            raise AprError(ErrorCode.UNSUPPORTED, "no Q/K row permutation for this RoPE layout",
                           family=family.name, rope_dim=config.rope_dim)
        n_heads = int(getattr(config, heads))
        moved = _relaid(moved, gguf_name, moved.shape,
                        lambda a, n=n_heads: rope_interleave(a, n))
    return moved


def _rope_freqs(config: ModelConfig, family: Family) -> LazyTensor:
    """`rope_freqs.weight [rope_dim / 2]` F32: unscaled / scaled frequency per rotated pair,
    the divisors llama.cpp applies (what its converter computes for LLaMA 3.1)."""
    from .config import RopeScaling
    from .layers import rope_inv_freq
    spec = {s.role: s for s in family.specs()}.get("rope_freqs")
    name = spec.names.get("gguf") if spec is not None else None
    if name is None:
        raise AprError(ErrorCode.UNSUPPORTED, "the family contract has no GGUF rope_freqs "
                       "tensor for this RoPE scaling", family=family.name,
                       rope_scaling=config.rope_scaling.kind)
    plain = rope_inv_freq(config.rope_dim, config.rope_theta, RopeScaling())
    scaled = rope_inv_freq(config.rope_dim, config.rope_theta, config.rope_scaling)
    divisors = (plain / scaled).astype("<f4")                             # [rope_dim / 2]
    return LazyTensor(name, dtypes.BY_NAME["F32"], divisors.shape, divisors.tobytes)


def hf_to_gguf(tensors: List[LazyTensor], meta: Dict[str, Any]) -> List[LazyTensor]:
    """Tensors of a HF model (with `meta["hf_config"]`, and `meta["hf_tokenizer"]` for a
    runnable file) renamed and laid out for llama.cpp, in llama.cpp's order. Records the
    GGUF KV block in `meta["gguf"]` (what `metadata.to_gguf` writes)."""
    hf_config = meta.get("hf_config")
    if not isinstance(hf_config, dict):
        raise AprError(ErrorCode.NOT_FOUND, "GGUF export needs the model's config.json "
                       "(convert from the model directory)")
    by_name = {t.name: t for t in tensors}
    config = config_from_hf(hf_config, by_name)
    family = family_for(str(hf_config.get("model_type", "")), "hf")
    arch = gguf_arch(family)
    resolved = resolve_tensors(family, "hf", config.dims(), config.flags(), config.n_layers,
                               by_name)
    specs = {spec.role: spec for spec in family.specs()}
    ordered: List[Tuple[Tuple[int, int, int], LazyTensor]] = []
    claimed = set()
    for (layer, role), found in resolved.items():
        spec = specs[role]
        if found is None or (spec.fallback and config.tied_embeddings):
            continue
        template = spec.names.get("gguf")
        if template is None:
            raise AprError(ErrorCode.UNSUPPORTED, "family role has no GGUF tensor name",
                           family=family.name, role=role)
        gguf_name = template.replace("{i}", str(layer))
        claimed.add(found.name)
        rank = list(specs).index(role)
        # token_embd first, then the blocks in order, then the other globals (output last).
        key = (0 if role == "embedding" else 1 if layer >= 0 else 2, layer, rank)
        ordered.append((key, _gguf_tensor(by_name[found.name], gguf_name, role,
                                          found.transposed, config, family)))
    if config.positions == "rope" and config.rope_scaling.kind in SCALING_AS_TENSOR:
        freqs = _rope_freqs(config, family)          # refuses a family without the role
        ordered.append(((2, -1, list(specs).index("rope_freqs")), freqs))
    lm_head = specs.get("lm_head")
    for name in by_name:
        ignorable = name.endswith(IGNORED_SUFFIXES) or (
            lm_head is not None and config.tied_embeddings
            and any(p + lm_head.names.get("hf", "") == name for p in family.prefixes("hf")))
        if name not in claimed and not ignorable:
            raise AprError(ErrorCode.UNSUPPORTED, "tensor has no GGUF name in the family "
                           "contract", tensor=name, family=family.name)
    kv: Dict[str, Any] = {"general.architecture": arch}
    types: Dict[str, Any] = {"general.architecture": "str"}
    name = meta.get("name") or hf_config.get("_name_or_path")
    if isinstance(name, str) and name:
        kv["general.name"], types["general.name"] = name, "str"
    for part in (hparam_kv(config, arch), _tokenizer_kv(meta, config)):
        kv.update(part[0])
        types.update(part[1])
    out = [tensor for _, tensor in sorted(ordered, key=lambda pair: pair[0])]
    meta["model_type"] = arch
    meta["gguf"] = {"kv": kv, "types": types, "alignment": 32,
                    "tensor_order": [t.name for t in out]}
    return out


def _tokenizer_kv(meta: Dict[str, Any], config: ModelConfig) -> Tuple[Dict[str, Any],
                                                                       Dict[str, Any]]:
    tokenizer = meta.get("hf_tokenizer")
    if not isinstance(tokenizer, dict):
        return {}, {}          # weights only: llama.cpp needs a vocabulary to run it
    from ..text.gguf_vocab import tokenizer_kv
    return tokenizer_kv(tokenizer, meta.get("hf_tokenizer_config"), config.n_vocab)


__all__ = ["hf_to_gguf", "hparam_kv", "gguf_arch", "rope_interleave", "ROTATED_ROLES"]
