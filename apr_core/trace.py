"""Payload tracing ("radioactive tracer", seed 000 §4.8.5): follow a prompt through a model
step by step and report what the residual stream looks like after each one.

    steps = trace(text_model.transformer, ids)        # [TraceStep] embedding .. output_norm
    drift = trace_diff(steps, other_steps)             # per-step drift between two models

Each step holds statistics of the hidden states `[T, d_model]` (`stats.tensor_stats`), the
time the step took, the first values of the last position's vector (the "payload") and the
anomalies it shows, judged by the table `ANOMALY_RULES`.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from .stats import tensor_stats

PAYLOAD_VALUES = 8
# Anomaly rules: (id, threshold, what it means). Residual streams legitimately carry large
# outlier features (Qwen2's reach the thousands), so growth is judged against the previous
# step rather than an absolute bound.
ANOMALY_RULES = (
    ("non_finite", 0, "NaN or Inf values: a corrupt weight or an overflow upstream"),
    ("dead", 0.5, "more than half the values are exactly 0: pruned or zeroed weights"),
    ("spike", 100.0, "RMS grew over 100x in one step: an exploding layer"),
)
# Relative L2 drift ||a - b|| / ||a|| from which two traces count as diverged.
DIVERGENCE_DRIFT = 0.05


class TraceStep(NamedTuple):
    name: str
    shape: List[int]
    mean: float
    std: float
    min: float
    max: float
    rms: float
    ms: float
    payload: List[float]
    anomalies: List[str]
    values: Optional[np.ndarray]   # the hidden states themselves, when kept for a diff

    def to_dict(self) -> Dict[str, Any]:
        out = self._asdict()
        out.pop("values")
        return out


def _anomalies(s: Any, rms: float, previous_rms: Optional[float]) -> List[str]:
    """The `ANOMALY_RULES` ids that the statistics `s` (a `TensorStats`) break."""
    rules = {rule: threshold for rule, threshold, _ in ANOMALY_RULES}
    found = []
    if s.nan + s.inf > rules["non_finite"]:
        found.append("non_finite")
    if s.zeros > rules["dead"] * s.count:
        found.append("dead")
    if previous_rms and rms > rules["spike"] * previous_rms:
        found.append("spike")
    return found


def trace(transformer: Any, ids: Sequence[int], keep_values: bool = False) -> List[TraceStep]:
    """Run `ids` through `transformer` from an empty cache and describe every step."""
    steps: List[TraceStep] = []
    clock = [time.perf_counter()]

    def observe(name: str, x: np.ndarray) -> None:
        now = time.perf_counter()
        values = np.asarray(x, np.float32)                            # [T, d_model]
        s = tensor_stats(name, values)
        rms = float(s.l2 / np.sqrt(max(s.count - s.nan - s.inf, 1)))   # over finite values
        previous = steps[-1].rms if steps else None
        steps.append(TraceStep(name, list(values.shape), s.mean, s.std, s.min, s.max, rms,
                               (now - clock[0]) * 1e3,
                               [float(v) if np.isfinite(v) else None     # JSON-safe
                                for v in values[-1, :PAYLOAD_VALUES]],
                               _anomalies(s, rms, previous),
                               values.copy() if keep_values else None))
        clock[0] = time.perf_counter()
    transformer.hidden_states(ids, transformer.new_cache(len(ids)), observe=observe)
    return steps


def trace_diff(a: Sequence[TraceStep], b: Sequence[TraceStep]) -> Dict[str, Any]:
    """Per step: relative L2 drift and cosine between two traces of the same prompt
    (both made with `keep_values=True`), and the first step past `DIVERGENCE_DRIFT` or
    holding NaN/Inf."""
    rows = []
    diverged = None
    for x, y in zip(a, b):
        if x.values is None or y.values is None or x.values.shape != y.values.shape:
            rows.append({"step": x.name, "drift": None, "cosine": None, "finite": None})
            continue
        u, v = x.values.astype(np.float64).ravel(), y.values.astype(np.float64).ravel()
        norm_u, norm_v = float(np.linalg.norm(u)), float(np.linalg.norm(v))
        drift = float(np.linalg.norm(u - v)) / norm_u if norm_u else float(norm_v > 0)
        cosine = float(u @ v) / (norm_u * norm_v) if norm_u and norm_v else float(
            norm_u == norm_v)
        finite = bool(np.isfinite(drift) and np.isfinite(cosine))
        # A NaN or Inf on either side is the strongest divergence there is (JSON has no
        # NaN, so the numbers are left out then).
        rows.append({"step": x.name, "drift": drift if finite else None,
                     "cosine": cosine if finite else None, "finite": finite,
                     "mean_a": x.mean, "mean_b": y.mean})
        if diverged is None and not (finite and drift <= DIVERGENCE_DRIFT):
            diverged = x.name
    return {"steps": rows, "diverged_at": diverged, "threshold": DIVERGENCE_DRIFT}


__all__ = ["trace", "trace_diff", "TraceStep", "ANOMALY_RULES", "DIVERGENCE_DRIFT"]
