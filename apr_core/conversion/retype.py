"""Re-typing tensors during a conversion: quantize, change float precision, validate.

    retype(tensors, meta, options) -> tensors whose loaders quantize on demand

Each output tensor stays a LazyTensor: its loader decodes the source to float32, runs the
inline validation (`quant.quality.validate`), encodes the target dtype and records a
`TensorQuality` row, so one tensor's float32 copy is alive at a time. Quantized sources are
dequantized first (re-quantizing is allowed and shows in the report as source_dtype).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional

import numpy as np

from .. import dtypes
from ..errors import AprError, ErrorCode
from .quality import QualityReport, TensorQuality, measure, validate
from ..tensor import LazyTensor

# Precision names (seed 000 §4.8.1 spells them fp16/fp32 too) -> float dtype.
PRECISIONS = {"f32": "F32", "f16": "F16", "bf16": "BF16", "fp32": "F32", "fp16": "F16"}
FLOAT_TYPES = ("F32", "F16", "BF16")


class RetypeOptions(NamedTuple):
    """What `convert()` asked for; see its docstring."""

    quantize: Optional[str] = None
    precision: Optional[str] = None
    force: bool = False
    keep_embeddings_q8: bool = False
    report: Optional[Any] = None        # QualityReport or callable(TensorQuality)
    progress: Optional[Callable[[str, int, int], None]] = None

    @property
    def active(self) -> bool:
        return bool(self.quantize or self.precision)


def _precision(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    if name.lower() not in PRECISIONS:
        raise AprError(ErrorCode.ARGUMENT, "precision must be f32, f16 or bf16", precision=name)
    return PRECISIONS[name.lower()]


def _n_gqa(meta: Dict[str, Any]) -> int:
    arch = meta.get("architecture") or {}
    try:
        return max(1, int(arch.get("n_heads", 1)) // max(1, int(arch.get("n_kv_heads") or
                                                                 arch.get("n_heads", 1))))
    except (TypeError, ValueError):
        return 1


def targets(tensors: List[LazyTensor], meta: Dict[str, Any],
            options: RetypeOptions) -> Dict[str, Optional[str]]:
    """The dtype name each tensor is written as, or None to copy its bytes unchanged."""
    out: Dict[str, Optional[str]] = {t.name: None for t in tensors}
    if options.quantize:
        from ..quant.recipes import plan
        out.update(plan([(t.name, t.shape) for t in tensors], options.quantize,
                        n_gqa=_n_gqa(meta), keep_embeddings_q8=options.keep_embeddings_q8))
    precision = _precision(options.precision)
    for tensor in tensors:
        # Precision applies to float matrices; 1-D tensors (norms, biases) stay as they
        # are, as llama.cpp keeps them F32.
        if (out[tensor.name] is None and precision and len(tensor.shape) >= 2
                and tensor.dtype.name in FLOAT_TYPES and tensor.dtype.name != precision):
            out[tensor.name] = precision
        if out[tensor.name] == tensor.dtype.name and not tensor.dtype.quantized:
            out[tensor.name] = None
    return out


def mark_file_type(meta: Dict[str, Any], quantize: Optional[str]) -> None:
    """Record a llama.cpp file type in GGUF KV `general.file_type`, as llama.cpp does."""
    if not quantize:
        return
    from ..quant.recipes import resolve
    file_type = resolve(quantize)[1]
    block = meta.get("gguf")
    if file_type is None or not isinstance(block, dict) or not isinstance(block.get("kv"), dict):
        return
    block["kv"]["general.file_type"] = file_type.ftype
    if isinstance(block.get("types"), dict):
        block["types"]["general.file_type"] = "u32"


def retype(tensors: List[LazyTensor], meta: Dict[str, Any],
           options: RetypeOptions) -> List[LazyTensor]:
    """`tensors` with loaders that validate and re-encode as `targets()` says; a file
    type is recorded in the metadata (`mark_file_type`)."""
    mark_file_type(meta, options.quantize)
    chosen = targets(tensors, meta, options)
    total = len(tensors)
    return [_wrap(tensor, chosen[tensor.name], options, index, total)
            for index, tensor in enumerate(tensors)]


def _record(options: RetypeOptions, row: TensorQuality) -> None:
    if isinstance(options.report, QualityReport):
        options.report.add(row)
    elif callable(options.report):
        options.report(row)


def _warnings(options: RetypeOptions) -> Optional[QualityReport]:
    return options.report if isinstance(options.report, QualityReport) else None


def _wrap(tensor: LazyTensor, target: Optional[str], options: RetypeOptions, index: int,
          total: int) -> LazyTensor:
    def decoded() -> np.ndarray:
        from ..quant import dequantize
        return dequantize(tensor.load(), tensor.dtype, tensor.shape)   # [*shape] float32

    def copy() -> bytes:
        data = tensor.load()
        # Norms and other small float tensors are checked even when copied unchanged.
        if tensor.dtype.name in FLOAT_TYPES and len(tensor.shape) <= 1:
            from ..quant import dequantize
            values = dequantize(data, tensor.dtype, tensor.shape)
            validate(tensor.name, values, options.force, _warnings(options))
        _tick()
        return data

    def encode() -> bytes:
        from ..quant import quantize
        values = decoded()
        validate(tensor.name, values, options.force, _warnings(options))
        data = quantize(values, target)
        source_bytes = tensor.dtype.nbytes(tensor.shape)
        _record(options, measure(tensor.name, values, str(target), data, tensor.dtype.name,
                                 source_bytes))
        _tick()
        return data

    def _tick() -> None:
        if options.progress is not None:
            options.progress(tensor.name, index + 1, total)

    if target is None:
        return LazyTensor(tensor.name, tensor.dtype, tensor.shape, copy)
    return LazyTensor(tensor.name, dtypes.by_name(target), tensor.shape, encode)


__all__ = ["RetypeOptions", "retype", "targets", "mark_file_type", "PRECISIONS"]
