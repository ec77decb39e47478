"""Unstructured magnitude pruning (seed 000 §4.8.1 "Pruning").

    prune_values(values, fraction)            -> copy with the smallest |v| fraction zeroed
    prune_model(model, fraction, threshold)   -> ModelView (lazy)

Only weight matrices are pruned (`view.transformable`: 2-D+ weights, not norms or the token
embedding). `fraction` zeroes exactly round(fraction * n) elements of each such tensor,
the smallest in magnitude (ties broken by position, via argpartition); `threshold` zeroes
every |v| < threshold instead. Pruned tensors keep their dtype when it can be re-encoded.
"""
from __future__ import annotations

import fnmatch
from typing import Any, List, Optional

import numpy as np

from ..errors import AprError, ErrorCode
from ..tensor import ModelFile
from .view import ModelView, derived, floats, storage_type, transformable


def prune_values(values: np.ndarray, fraction: Optional[float] = None,
                 threshold: Optional[float] = None) -> np.ndarray:
    """`values` with round(fraction * n) smallest-magnitude elements (or every element with
    |v| < threshold) set to zero."""
    flat = np.array(values, dtype=np.float32).reshape(-1)
    if threshold is not None:
        flat[np.abs(flat) < threshold] = 0.0
    if fraction is not None:
        if not 0.0 <= fraction <= 1.0:
            raise AprError(ErrorCode.ARGUMENT, "prune fraction must be in [0, 1]",
                           fraction=fraction)
        count = int(round(fraction * flat.size))
        if count:
            flat[np.argpartition(np.abs(flat), count - 1)[:count]] = 0.0
    return flat.reshape(np.shape(values))


def prune_model(model: ModelFile, fraction: Optional[float] = None,
                threshold: Optional[float] = None, target: Optional[str] = None) -> ModelView:
    """A lazy view of `model` with its weight matrices pruned (`target`: a glob on names)."""
    from ..formats.logical import apr_metadata
    if fraction is None and threshold is None:
        raise AprError(ErrorCode.ARGUMENT, "pruning needs a fraction or a threshold")
    out: List[Any] = []
    pruned = []
    for name, info in model.tensors.items():
        selected = transformable(name, info.shape) and (
            target is None or fnmatch.fnmatchcase(name, target))
        if not selected:
            out.append(model.lazy(name))
            continue
        pruned.append(name)

        def compute(name: str = name) -> np.ndarray:
            return prune_values(floats(model.lazy(name)), fraction, threshold)
        out.append(derived(name, storage_type(info.dtype, info.shape), info.shape, compute))
    meta = apr_metadata(model)
    meta["pruning"] = {"method": "magnitude", "fraction": fraction, "threshold": threshold,
                       "tensors": len(pruned)}
    return ModelView(meta, out)


__all__ = ["prune_values", "prune_model"]
