"""Merging models tensor by tensor (seed 000 §4.9).

    merge_values(arrays, strategy, ...)  -> float32 array
    merge_models(models, strategy, ...)  -> ModelView (lazy: one tensor merged at a time)

Strategies:
- `average`: the element-wise mean.
- `weighted`: sum of w_i * theta_i with the weights normalised to sum 1.
- `ties` (Yadav et al., 2023, "TIES-Merging"): task vectors tau_i = theta_i - base are
  trimmed to their top `density` fraction by magnitude (ceil(density * n) values), a sign is elected per element
  (the sign of the sum of trimmed tau_i), and the trimmed values agreeing with it are
  averaged: theta = base + lam * mean_{i: sign(tau_i) = elected, tau_i != 0} tau_i.
- `dare` (Yu et al., 2023, "Language Models are Super Mario"): each tau_i keeps every
  element with probability `density` and is rescaled by 1/density; theta = base +
  lam * sum_i w_i tau_i (w_i = 1/n unless weights are given). Seeded, so reproducible.
- `slerp`: spherical interpolation of two models per tensor at `t` (linear when the two
  are (anti)parallel or zero).
Without a base model, `ties` and `dare` take base = 0 (task vectors are the weights).
Tensors that are not floating point (token ids, masks) must be identical and are copied.
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode
from ..tensor import ModelFile
from .view import ModelView, derived, floats, storage_type

STRATEGIES = ("average", "weighted", "ties", "dare", "slerp")


def _normalised(weights: Optional[Sequence[float]], n: int) -> np.ndarray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or float(np.sum(w)) == 0.0:
        raise AprError(ErrorCode.ARGUMENT, "need one finite weight per model, not summing to 0",
                       weights=list(weights), models=n)
    return w / np.sum(w)


def _trim(tau: np.ndarray, density: float) -> np.ndarray:
    """tau with all but its top `density` fraction (by |value|) set to zero."""
    flat = tau.reshape(-1)
    keep = int(math.ceil(density * flat.size))   # density > 0 always keeps something
    if keep >= flat.size:
        return tau.copy()
    out = np.zeros_like(flat)
    if keep > 0:
        top = np.argpartition(np.abs(flat), flat.size - keep)[flat.size - keep:]
        out[top] = flat[top]
    return out.reshape(tau.shape)


def _ties(taus: np.ndarray, density: float) -> np.ndarray:
    trimmed = np.stack([_trim(t, density) for t in taus])          # [n, *shape]
    elected = np.sign(np.sum(trimmed, axis=0))                      # [*shape]
    agree = (np.sign(trimmed) == elected) & (trimmed != 0)          # [n, *shape]
    count = np.sum(agree, axis=0)
    total = np.sum(np.where(agree, trimmed, 0.0), axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), 0.0)


def _slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return (1 - t) * a + t * b
    cos = float(np.clip(np.sum(a * b) / (na * nb), -1.0, 1.0))
    omega = float(np.arccos(cos))
    if np.sin(omega) < 1e-6:
        return (1 - t) * a + t * b
    return (np.sin((1 - t) * omega) * a + np.sin(t * omega) * b) / np.sin(omega)


def merge_values(arrays: Sequence[np.ndarray], strategy: str, *,
                 weights: Optional[Sequence[float]] = None, base: Optional[np.ndarray] = None,
                 density: float = 0.5, lam: float = 1.0, t: float = 0.5,
                 rng: Optional[np.random.RandomState] = None) -> np.ndarray:
    """Merge same-shape float arrays; returns float32 of the same shape (math in float64)."""
    if strategy not in STRATEGIES:
        raise AprError(ErrorCode.ARGUMENT, "unknown merge strategy", strategy=strategy,
                       known=list(STRATEGIES))
    stack = np.stack([np.asarray(a, dtype=np.float64) for a in arrays])   # [n, *shape]
    n = stack.shape[0]
    if not 0.0 < density <= 1.0:
        raise AprError(ErrorCode.ARGUMENT, "density must be in (0, 1]", density=density)
    if strategy == "average":
        out = np.mean(stack, axis=0)
    elif strategy == "weighted":
        out = np.tensordot(_normalised(weights, n), stack, axes=1)
    elif strategy == "slerp":
        if n != 2 or not 0.0 <= t <= 1.0:
            raise AprError(ErrorCode.ARGUMENT, "slerp merges exactly two models at t in [0, 1]",
                           models=n, t=t)
        out = _slerp(stack[0].reshape(-1), stack[1].reshape(-1), t).reshape(stack.shape[1:])
    else:
        origin = np.zeros(stack.shape[1:]) if base is None else np.asarray(base, np.float64)
        taus = stack - origin                                             # [n, *shape]
        if strategy == "ties":
            out = origin + lam * _ties(taus, density)
        else:
            rng = rng if rng is not None else np.random.RandomState(0)
            keep = rng.random_sample(taus.shape) < density
            dropped = np.where(keep, taus / density, 0.0)
            out = origin + lam * np.tensordot(_normalised(weights, n), dropped, axes=1)
    return out.astype(np.float32)


def _check_compatible(models: Sequence[ModelFile]) -> List[str]:
    names = list(models[0].tensors)
    for index, model in enumerate(models[1:], 1):
        if set(model.tensors) != set(names):
            missing = sorted(set(names) ^ set(model.tensors))
            raise AprError(ErrorCode.VALIDATION, "models to merge have different tensors",
                           model=index, first_difference=missing[0], differences=len(missing))
        for name in names:
            if tuple(model.info(name).shape) != tuple(models[0].info(name).shape):
                raise AprError(ErrorCode.VALIDATION, "tensor shapes differ between models",
                               tensor=name, model=index, shape=model.info(name).shape,
                               expected=models[0].info(name).shape)
    return names


def merge_models(models: Sequence[ModelFile], strategy: str, *,
                 weights: Optional[Sequence[float]] = None, base: Optional[ModelFile] = None,
                 density: float = 0.5, lam: float = 1.0, t: float = 0.5,
                 seed: int = 0) -> ModelView:
    """A lazy view of the merged model, with the first model's metadata."""
    if len(models) < 2:
        raise AprError(ErrorCode.ARGUMENT, "merge needs at least two models", models=len(models))
    names = _check_compatible(list(models) + ([base] if base is not None else []))
    merge_values([np.zeros(1)] * len(models), strategy, weights=weights, density=density,
                 t=t)   # argument checks up front, before any tensor is read
    out: List[Any] = []
    for index, name in enumerate(names):
        info = models[0].info(name)
        if info.dtype.numpy is not None and info.dtype.numpy[-2] in "iu":
            first = models[0].read_raw(name).data
            if any(m.read_raw(name).data != first for m in models[1:]):
                raise AprError(ErrorCode.VALIDATION, "integer tensors differ between models "
                               "and cannot be merged", tensor=name)
            out.append(models[0].lazy(name))
            continue

        def compute(name: str = name, index: int = index) -> np.ndarray:
            arrays = [floats(m.lazy(name)) for m in models]
            origin = floats(base.lazy(name)) if base is not None else None
            return merge_values(arrays, strategy, weights=weights, base=origin,
                                density=density, lam=lam, t=t,
                                rng=np.random.RandomState((seed + index) % (1 << 32)))
        out.append(derived(name, storage_type(info.dtype, info.shape), info.shape, compute))
    from ..formats.logical import apr_metadata
    meta = apr_metadata(models[0])
    meta["merge"] = {"strategy": strategy, "models": len(models),
                     "weights": None if weights is None else [float(w) for w in weights],
                     "density": density, "lambda": lam, "t": t, "seed": seed,
                     "base": base is not None}
    return ModelView(meta, out)


__all__ = ["STRATEGIES", "merge_values", "merge_models"]
