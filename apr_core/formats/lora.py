"""LoRA adapter files: a PEFT directory or a llama.cpp GGUF LoRA, read into one form.

    adapter = read_adapter("my-adapter/")     # adapter_config.json + adapter_model.safetensors
    adapter = read_adapter("my-adapter.gguf")  # general.type=adapter, adapter.type=lora
    for pair in adapter.pairs: pair.target, pair.a.shape, pair.b.shape, pair.scaling

Each pair is one adapted base weight: `target` is the base tensor's name in the adapter's
naming scheme (`source`: "hf" for PEFT, "gguf" for llama.cpp), `a` the raw `[r, in]`
tensor, `b` the raw `[out, r]` tensor and `scaling` what `B A` is multiplied by
(`alpha / r`, or `alpha / sqrt(r)` with PEFT's use_rslora). Everything is checked here
that needs no base model (both halves present, ranks agree, config keys); the base's names
and shapes are checked where the adapter is applied (`apr_core.model.lora`). Stdlib only.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ..errors import AprError, ErrorCode
from ..json_files import read_json_file
from ..tensor import RawTensor

PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
# (suffix of A, suffix of B) per source; the base weight is the name before it + ".weight"
# (PEFT: `...q_proj.lora_A.weight`) or the name before it (GGUF: `...attn_q.weight.lora_a`).
_HALVES = {"hf": (".lora_A.weight", ".lora_B.weight"), "gguf": (".lora_a", ".lora_b")}


class LoraPair(NamedTuple):
    """One adapted weight: `W + scaling * B A`."""

    target: str          # base tensor name in the adapter's scheme
    a: RawTensor         # [r, in]
    b: RawTensor         # [out, r]
    scaling: float       # alpha / r (PEFT use_rslora: alpha / sqrt(r))


class LoraAdapter(NamedTuple):
    """A read adapter: its tensor naming scheme ("hf" or "gguf") and adapted weights."""

    path: str
    source: str
    pairs: Tuple[LoraPair, ...]
    arch: Optional[str] = None   # a GGUF LoRA's general.architecture (the base's)


def read_adapter(path: str) -> LoraAdapter:
    """Read a PEFT adapter directory or a GGUF LoRA file (AprError with a code on anything
    missing, malformed, truncated or not a LoRA)."""
    if os.path.isdir(path):
        return _read_peft(path)
    if not os.path.exists(path):
        raise AprError(ErrorCode.NOT_FOUND, "no LoRA adapter at this path", path=path)
    return _read_gguf(path)


def _open(path: str) -> Any:
    from .open import open_model     # the one opener (safetensors, GGUF), checks framing
    return open_model(path)


def _read_peft(directory: str) -> LoraAdapter:
    config = read_json_file(os.path.join(directory, PEFT_CONFIG), PEFT_CONFIG)
    kind = str(config.get("peft_type", "LORA")).upper()
    if kind != "LORA":
        raise AprError(ErrorCode.UNSUPPORTED, "only LoRA adapters are supported",
                       peft_type=kind, path=directory)
    if config.get("use_dora"):
        raise AprError(ErrorCode.UNSUPPORTED, "DoRA adapters (use_dora) are not supported",
                       path=directory)
    for key in ("r", "lora_alpha"):
        if not isinstance(config.get(key), (int, float)) or config[key] <= 0:
            raise AprError(ErrorCode.VALIDATION, "adapter_config.json needs a positive "
                           "number for this key", key=key, value=config.get(key))
    weights = os.path.join(directory, PEFT_WEIGHTS)
    if not os.path.isfile(weights):
        raise AprError(ErrorCode.NOT_FOUND, "the adapter directory has no weights",
                       path=directory, expected=PEFT_WEIGHTS)
    with _open(weights) as model_file:
        tensors = {_strip(name): model_file.read_raw(name) for name in model_file.tensors}
    rslora = bool(config.get("use_rslora"))

    def scaling(target: str, rank: int) -> float:
        module = target[:-len(".weight")]
        r = _pattern_value(config.get("rank_pattern") or {}, module, config["r"])
        alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config["lora_alpha"])
        if int(r) != rank:
            raise AprError(ErrorCode.VALIDATION, "the adapter's rank differs from its config",
                           tensor=target, rank=rank, config_r=r)
        return float(alpha) / (math.sqrt(rank) if rslora else rank)

    return LoraAdapter(directory, "hf", _pairs(tensors, "hf", scaling, directory))


def _strip(name: str) -> str:
    return name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name


def _pattern_value(patterns: Dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern: a key matches a module whose name is the key
    or ends with "." + key (the key may be a regular expression); first match wins."""
    for key, value in patterns.items():
        if re.match(r"(.*\.)?{}$".format(key), module):
            return value
    return default


def _read_gguf(path: str) -> LoraAdapter:
    with _open(path) as model_file:
        if model_file.format != "gguf":
            raise AprError(ErrorCode.FORMAT, "a LoRA file must be GGUF (or a PEFT "
                           "directory)", path=path, format=model_file.format)
        meta = model_file.metadata
        if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
            raise AprError(ErrorCode.FORMAT, "this GGUF is not a LoRA adapter (general.type="
                           "adapter, adapter.type=lora)", path=path,
                           general_type=meta.get("general.type"),
                           adapter_type=meta.get("adapter.type"))
        alpha = meta.get("adapter.lora.alpha")
        if not isinstance(alpha, (int, float)):
            raise AprError(ErrorCode.NOT_FOUND, "the GGUF LoRA has no adapter.lora.alpha",
                           path=path)
        tensors = {name: model_file.read_raw(name) for name in model_file.tensors}
    # llama.cpp: scale = alpha / rank (alpha 0 means 1.0)
    arch = meta.get("general.architecture")
    return LoraAdapter(path, "gguf", _pairs(
        tensors, "gguf", lambda target, rank: float(alpha) / rank if alpha else 1.0, path),
        arch if isinstance(arch, str) else None)


def _pairs(tensors: Dict[str, RawTensor], source: str, scaling: Any, path: str
           ) -> Tuple[LoraPair, ...]:
    """Pair every A with its B; anything else in the file is refused (a LoRA that also
    trains other weights, e.g. PEFT's modules_to_save, is not a plain low-rank delta)."""
    a_suffix, b_suffix = _HALVES[source]
    base = ".weight" if source == "hf" else ""
    halves: Dict[str, List[Optional[RawTensor]]] = {}
    for name, raw in tensors.items():
        for index, suffix in enumerate((a_suffix, b_suffix)):
            if name.endswith(suffix):
                halves.setdefault(name[:-len(suffix)] + base, [None, None])[index] = raw
                break
        else:
            raise AprError(ErrorCode.UNSUPPORTED, "the adapter holds a tensor that is not a "
                           "LoRA half", tensor=name, path=path)
    if not halves:
        raise AprError(ErrorCode.NOT_FOUND, "the adapter holds no LoRA tensors", path=path)
    out = []
    for target in sorted(halves):
        a, b = halves[target]
        if a is None or b is None:
            raise AprError(ErrorCode.NOT_FOUND, "a LoRA weight lacks its {} half".format(
                "A" if a is None else "B"), tensor=target, path=path)
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[1]:
            raise AprError(ErrorCode.VALIDATION, "LoRA halves must be A [r, in] and B "
                           "[out, r] with the same r", tensor=target, a_shape=a.shape,
                           b_shape=b.shape, path=path)
        out.append(LoraPair(target, a, b, scaling(target, int(a.shape[0]))))
    return tuple(out)


__all__ = ["LoraPair", "LoraAdapter", "read_adapter", "PEFT_CONFIG", "PEFT_WEIGHTS"]
