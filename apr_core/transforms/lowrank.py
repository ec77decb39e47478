"""Low-rank factorization by truncated SVD (seed 000 §4.8.1 "Low-Rank Factorization").

    factorize(w, rank)               -> (a [out, r], b [r, in]) with a @ b the best rank-r
                                        approximation of w (Eckart-Young)
    lowrank_model(model, rank)       -> ModelView with each weight matrix W replaced by
                                        `W.lowrank_a` and `W.lowrank_b`
    expand_model(model)              -> ModelView with every factorized W rebuilt (F32)

A matrix is factorized only when it shrinks: rank * (out + in) < out * in. The metadata
key `lowrank` lists each factorized tensor with its rank, shape and factor names, which is
what `expand_model` (and any loader) uses to rebuild W = a @ b.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from ..tensor import ModelFile
from .view import ModelView, derived, floats, storage_type, transformable

KEY = "lowrank"


def factorize(w: np.ndarray, rank: int) -> Tuple[np.ndarray, np.ndarray]:
    """[out, in] -> ([out, r], [r, in]) float32, r = min(rank, out, in)."""
    if rank < 1:
        raise AprError(ErrorCode.ARGUMENT, "rank must be at least 1", rank=rank)
    u, s, vt = np.linalg.svd(np.asarray(w, dtype=np.float64), full_matrices=False)
    r = min(rank, s.size)
    a = u[:, :r] * s[:r]                     # [out, r]: singular values folded into a
    return a.astype(np.float32), vt[:r].astype(np.float32)   # [r, in]


def lowrank_model(model: ModelFile, rank: int, target: Optional[str] = None) -> ModelView:
    """A view with every (selected) 2-D weight matrix that shrinks stored as two factors."""
    from ..formats.logical import apr_metadata
    if rank < 1:
        raise AprError(ErrorCode.ARGUMENT, "rank must be at least 1", rank=rank)
    out: List[Any] = []
    record: Dict[str, Any] = {}
    for name, info in model.tensors.items():
        shape = tuple(info.shape)
        selected = len(shape) == 2 and transformable(name, shape) and \
            rank * (shape[0] + shape[1]) < shape[0] * shape[1] and \
            (target is None or fnmatch.fnmatchcase(name, target))
        if not selected:
            out.append(model.lazy(name))
            continue
        names = (name + ".lowrank_a", name + ".lowrank_b")
        cache: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}

        def factor(which: int, name: str = name,
                   cache: Dict[str, Tuple[np.ndarray, np.ndarray]] = cache) -> np.ndarray:
            # Writers load a then b in name order: one SVD serves both, then is dropped.
            if name not in cache:
                cache[name] = factorize(floats(model.lazy(name)), rank)
            return cache.pop(name)[which] if which == 1 else cache[name][which]
        dtype = "F16" if storage_type(info.dtype, shape) == "F16" else "F32"
        out.append(derived(names[0], dtype, (shape[0], rank), lambda f=factor: f(0)))
        out.append(derived(names[1], dtype, (rank, shape[1]), lambda f=factor: f(1)))
        record[name] = {"rank": rank, "shape": list(shape), "a": names[0], "b": names[1],
                        "dtype": info.dtype.name}
    meta = apr_metadata(model)
    meta[KEY] = record
    return ModelView(meta, out)


def expand_model(model: ModelFile) -> ModelView:
    """A view with every factorized matrix rebuilt as a @ b (F32), factors removed."""
    from ..formats.logical import apr_metadata
    meta = apr_metadata(model)
    record = meta.pop(KEY, None) or {}
    factors = {entry["a"] for entry in record.values()} | {e["b"] for e in record.values()}
    out: List[Any] = [model.lazy(n) for n in model.tensors if n not in factors]
    for name, entry in sorted(record.items()):
        if entry["a"] not in model.tensors or entry["b"] not in model.tensors:
            raise AprError(ErrorCode.CORRUPT, "low-rank factor missing", tensor=name)

        def compute(entry: Dict[str, Any] = entry) -> np.ndarray:
            return floats(model.lazy(entry["a"])) @ floats(model.lazy(entry["b"]))  # [out, in]
        out.append(derived(name, "F32", tuple(entry["shape"]), compute))
    return ModelView(meta, out)


__all__ = ["factorize", "lowrank_model", "expand_model", "KEY"]
