"""Metadata carried between formats, so conversions lose nothing.

APR metadata is the hub. A GGUF file's KV pairs travel whole under `"gguf"` (values *and*
their GGUF types, so GGUF -> APR -> GGUF gives identical pairs); SafeTensors' string map
travels under `"safetensors"`; and an APR file written out as SafeTensors keeps its full
APR metadata as JSON under the `apr.metadata` key, so it comes back intact. Quantized
tensors stored in SafeTensors (which has no block types) are written as U8 byte arrays and
listed under `packed_tensors` with their real dtype and shape.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple, TypeVar

from .. import hparams
from ..errors import AprError, ErrorCode
from .gguf_lazy import GGUFArray

T = TypeVar("T")

APR_VERSION = "2.0.0"
ST_APR_KEY = "apr.metadata"
PACKED_KEY = "packed_tensors"

# APR "architecture" key -> GGUF key suffix after "<arch>." (columns of apr_core.hparams).
GGUF_ARCH_KEYS = hparams.apr_gguf_pairs()


def from_gguf(kv_block: Dict[str, Any]) -> Dict[str, Any]:
    """APR metadata for a GGUF file, given `gguf_kv_block(file)`."""
    kv = kv_block.get("kv", {})
    arch = kv.get("general.architecture", "unknown")
    architecture: Dict[str, Any] = {}
    for apr_key, suffix in GGUF_ARCH_KEYS:
        value = kv.get("{}.{}".format(arch, suffix))
        if value is not None:
            architecture[apr_key] = value
    tokens = kv.get("tokenizer.ggml.tokens")
    if "n_vocab" not in architecture and isinstance(tokens, (list, GGUFArray)):
        architecture["n_vocab"] = len(tokens)
    meta: Dict[str, Any] = {
        "apr_version": APR_VERSION,
        "model_type": arch,
        "architecture": architecture,
        "source_format": "gguf",
        "gguf": kv_block,
    }
    if isinstance(kv.get("general.name"), str):
        meta["name"] = kv["general.name"]
    return meta


def from_safetensors(st_metadata: Dict[str, str]) -> Dict[str, Any]:
    """APR metadata for a SafeTensors file (restoring what an APR export stored in it)."""
    stored = st_metadata.get(ST_APR_KEY)
    if stored is not None:
        try:
            meta = json.loads(stored)
        except ValueError:
            raise AprError(ErrorCode.FORMAT, "apr.metadata in SafeTensors header is not JSON")
        if not isinstance(meta, dict):
            raise AprError(ErrorCode.FORMAT, "apr.metadata in SafeTensors header is not an object")
        return meta
    return {
        "apr_version": APR_VERSION,
        "model_type": "unknown",
        "architecture": {},
        "source_format": "safetensors",
        "safetensors": dict(st_metadata),
    }


def to_gguf(meta: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]], int]:
    """(kv, kv_types, alignment) for writing `meta` as GGUF."""
    block = meta.get("gguf")
    if isinstance(block, dict) and isinstance(block.get("kv"), dict):
        return dict(block["kv"]), block.get("types"), int(block.get("alignment", 32))
    arch = str(meta.get("model_type", "unknown"))
    kv: Dict[str, Any] = {"general.architecture": arch}
    if "name" in meta:
        kv["general.name"] = str(meta["name"])
    architecture = meta.get("architecture") or {}
    for apr_key, suffix in GGUF_ARCH_KEYS:
        if apr_key in architecture:
            kv["{}.{}".format(arch, suffix)] = architecture[apr_key]
    return kv, None, 32


def gguf_tensor_order(meta: Dict[str, Any], tensors: List[T]) -> List[T]:
    """`tensors` in the order the source GGUF had them (unknown names keep their place after)."""
    order = (meta.get("gguf") or {}).get("tensor_order")
    if not isinstance(order, list):
        return list(tensors)
    rank = {name: i for i, name in enumerate(order)}
    return sorted(tensors, key=lambda t: rank.get(t.name, len(rank)))


def to_safetensors(meta: Dict[str, Any]) -> Dict[str, str]:
    """SafeTensors' string map for `meta`: the original map plus the full APR metadata."""
    out = {str(k): str(v) for k, v in (meta.get("safetensors") or {}).items()}
    out[ST_APR_KEY] = json.dumps(meta, separators=(",", ":"))
    return out
