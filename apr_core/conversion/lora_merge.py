"""`apr export MODEL --merge-lora FILE[:SCALE] -o OUT`: a model with LoRA adapters merged in.

The adapters are applied exactly as at run time (`apr_core.model.lora.apply_adapters`: the
same name mapping, shape checks and Q/K row layout), then every adapted weight is written
as its dequantized base plus `scale * alpha/r * B A`:

- a float base (F32, F16, BF16) keeps its type;
- a block-quantized base (Q4_K, Q8_0 ...) is written as F16: the merged values are no
  longer on the base's quantization grid, and re-quantizing them would add a second
  rounding on top of the first (`--quantize` re-encodes the output as asked).

Every other tensor keeps its bytes. Nothing is written when an adapter does not fit.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

from .. import dtypes
from ..formats.logical import apr_metadata
from ..formats.lora import read_adapter
from ..formats.open import open_model
from ..model.lora import AdaptedLinear, apply_adapters
from ..model.transformer import Transformer, read_hf_config
from ..quant import quantize
from ..tensor import LazyTensor
from ..transforms.view import ModelView
from .convert import convert

FLOAT_TYPES = ("F32", "F16", "BF16")
MERGED_BLOCK_TYPE = "F16"     # what a block-quantized base's merged weight is written as


def merged_type(base_type: str) -> str:
    """The dtype name a merged weight is written in, for its base's dtype name."""
    return base_type if base_type in FLOAT_TYPES else MERGED_BLOCK_TYPE


def merge_lora(path: str, adapters: Sequence[Tuple[str, float]], dest: str, fmt: Any = None,
               **convert_options: Any) -> Dict[str, Any]:
    """Write `path` (a model file or HF directory) with `adapters` ((path, scale) each)
    merged into `dest` through `convert`; returns {"format", "merged": {tensor: dtype}}."""
    read = [(read_adapter(p), scale) for p, scale in adapters]      # all checked first
    model_file = open_model(path)
    try:
        hf_config = read_hf_config(path) if os.path.isdir(path) else None
        adapted = apply_adapters(Transformer.from_model_file(model_file, hf_config=hf_config),
                                 read)
        by_name = {lin.base.name: lin for block in adapted.blocks
                   for lin in block.linears.values() if isinstance(lin, AdaptedLinear)}
        tensors: List[Any] = []
        merged: Dict[str, str] = {}
        for tensor in model_file.lazy_tensors():
            linear = by_name.get(tensor.name)
            if linear is None:
                tensors.append(tensor)
                continue
            tensors.append(_merged_tensor(tensor, linear))
            merged[tensor.name] = tensors[-1].dtype.name
        view = ModelView(apr_metadata(model_file, path), tensors)
        written = convert(view, dest, fmt, **convert_options)
    finally:
        model_file.close()
    return {"format": written, "merged": merged}


def _merged_tensor(tensor: LazyTensor, linear: AdaptedLinear) -> LazyTensor:
    dtype = dtypes.BY_NAME[merged_type(tensor.dtype.name)]
    transposed = tuple(tensor.shape) != tuple(linear.shape)   # HF Conv1D keeps [in, out]

    def load() -> bytes:
        weight = linear.merged()                                  # [out, in] float32
        return quantize(weight.T if transposed else weight, dtype)
    return LazyTensor(tensor.name, dtype, tuple(tensor.shape), load)


__all__ = ["merge_lora", "merged_type", "MERGED_BLOCK_TYPE"]
