"""A model file's logical view, whatever format it was read from: its metadata in APR
form (`apr_metadata`) and its tensors with the block-quantized ones a SafeTensors export
packed as U8 restored (`unpack_tensors`). Read-only; conversion, statistics and the CLI
build on it.
"""
from __future__ import annotations

from typing import Any, Dict, List

from .. import dtypes
from ..errors import AprError, ErrorCode
from ..tensor import LazyTensor, ModelFile
from . import metadata as md


def apr_metadata(model: ModelFile, source: Any = None, lazy: bool = False) -> Dict[str, Any]:
    """The model's metadata in APR form, whatever format it was read from. When `source`
    is a Hugging Face model directory (or a weights file in one), its config, tokenizer and
    generation settings come along (`hf_dir.HF_FILES`). `lazy`: a GGUF file's large arrays
    stay undecoded `gguf_lazy.GGUFArray`s (header-only readers; not JSON-able as is)."""
    if model.format == "safetensors":
        from .hf_dir import hf_directory, read_side_files
        meta = md.from_safetensors(model.metadata)
        directory = hf_directory(source)
        if directory is not None:
            for key, value in read_side_files(directory).items():
                meta.setdefault(key, value)
        return meta
    if model.format == "gguf":
        from .gguf import gguf_kv_block
        meta = md.from_gguf(gguf_kv_block(model, lazy=lazy))
        # APR indexes are sorted by name; remember GGUF's order so an export restores it.
        meta["gguf"]["tensor_order"] = list(model.tensors)
        return meta
    return dict(model.metadata)


def unpack_tensors(model: ModelFile, meta: Dict[str, Any]) -> List[LazyTensor]:
    """The model's tensors, restoring block-quantized tensors a SafeTensors export packed."""
    packed = meta.get(md.PACKED_KEY) or {}
    out = []
    for tensor in model.lazy_tensors():
        record = packed.get(tensor.name)
        if record is not None:
            dtype = dtypes.by_name(record["dtype"])
            shape = tuple(record["shape"])
            if dtype.nbytes(shape) != model.info(tensor.name).nbytes:
                raise AprError(ErrorCode.CORRUPT, "packed tensor size does not match its record",
                               tensor=tensor.name)
            tensor = LazyTensor(tensor.name, dtype, shape, tensor.loader)
        out.append(tensor)
    return out


__all__ = ["apr_metadata", "unpack_tensors"]
