"""Quality of a conversion, per tensor, and the inline validation that guards it.

    measure(name, original, dtype, data, source_dtype, source_bytes) -> TensorQuality
    QualityReport: .add(TensorQuality), .totals(), .to_dict()
    check_values(name, values)        -> problems (list of str), empty when fine
    validate(name, values, force)     -> raises AprError(VALIDATION) unless forced

The report (seed 000 §4.8.4) compares each written tensor, decoded back to float32, with
the float32 values it was made from: RMSE, max |error|, cosine similarity, bits per weight
and bytes before (source storage) and after. Inline validation (seed 000 §10.10, §13.6)
runs as tensors are written: NaN/Inf anywhere, and LayerNorm/RMSNorm weights whose mean is
outside `EXPECTED_MEANS`, abort the conversion unless `force` is set (then they are
recorded as warnings).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from ..stats import RULES

# (pattern on the tensor name, (low, high) acceptable mean); the first match applies.
# The "error" rows of THE expected-range table, `stats.RULES` (seed 000 §10.9).
EXPECTED_MEANS = tuple((rule.pattern, (rule.low, rule.high)) for rule in RULES
                       if rule.stat == "mean" and rule.severity == "error")


class TensorQuality(NamedTuple):
    """Error of one written tensor against its float32 source values."""

    name: str
    source_dtype: str
    dtype: str
    shape: Tuple[int, ...]
    rmse: float
    max_abs_error: float
    cosine: float
    bits_per_weight: float
    bytes_before: int
    bytes_after: int

    def to_dict(self) -> Dict[str, Any]:
        out = self._asdict()
        out["shape"] = list(self.shape)
        return out


# Elements per step of `measure`: float64 scratch of 64 Ki elements stays in L2, where
# converting whole tensors to float64 at once is bound by page faults.
CHUNK = 1 << 16


def _cosine(dot: float, na: float, nb: float) -> float:
    """Cosine similarity from sums; 1.0 when both are all zero, 0.0 when one is."""
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / math.sqrt(na * nb)


def measure(name: str, original: np.ndarray, dtype: str, data: bytes, source_dtype: str,
            source_bytes: int) -> TensorQuality:
    """Decode `data` (`dtype` bytes written for `original`) and compare the two.

    Sums are float64, taken over chunks of `CHUNK` elements.
    """
    from ..quant.api import dequantize
    shape = tuple(int(d) for d in original.shape)
    ref_all = np.asarray(original, dtype=np.float32).reshape(-1)      # [n]
    got_all = dequantize(data, dtype, shape).reshape(-1)              # [n]
    count = ref_all.size
    sq = dot = na = nb = max_abs = 0.0
    for start in range(0, count, CHUNK):
        ref = ref_all[start:start + CHUNK].astype(np.float64)         # [chunk]
        got = got_all[start:start + CHUNK].astype(np.float64)         # [chunk]
        diff = got - ref
        # einsum, not np.dot: this machine's BLAS dot costs ~10x more on 64 Ki elements.
        sq += float(np.einsum("i,i->", diff, diff))
        dot += float(np.einsum("i,i->", ref, got))
        na += float(np.einsum("i,i->", ref, ref))
        nb += float(np.einsum("i,i->", got, got))
        max_abs = max(max_abs, float(np.max(np.abs(diff))))
    rmse = math.sqrt(sq / count) if count else 0.0
    bpw = 8.0 * len(data) / count if count else 0.0
    return TensorQuality(name, source_dtype, dtype, shape, rmse, max_abs,
                         _cosine(dot, na, nb), bpw, int(source_bytes), len(data))


class QualityReport:
    """Per-tensor quality rows plus validation warnings, in write order."""

    def __init__(self) -> None:
        self.tensors: List[TensorQuality] = []
        self.warnings: List[str] = []

    def add(self, row: TensorQuality) -> None:
        self.tensors.append(row)

    def totals(self) -> Dict[str, Any]:
        """Sizes, parameter count, overall bits per weight, worst cosine and RMSE."""
        params = sum(int(np.prod(t.shape)) if t.shape else 1 for t in self.tensors)
        before = sum(t.bytes_before for t in self.tensors)
        after = sum(t.bytes_after for t in self.tensors)
        return {"tensors": len(self.tensors), "params": params, "bytes_before": before,
                "bytes_after": after, "bits_per_weight": 8.0 * after / params if params else 0.0,
                "min_cosine": min([t.cosine for t in self.tensors] or [1.0]),
                "max_rmse": max([t.rmse for t in self.tensors] or [0.0])}

    def to_dict(self) -> Dict[str, Any]:
        return {"totals": self.totals(), "warnings": list(self.warnings),
                "tensors": [t.to_dict() for t in self.tensors]}


def expected_mean(name: str) -> Optional[Tuple[float, float]]:
    """The acceptable mean range for `name`, or None when the tables say nothing."""
    for pattern, bounds in EXPECTED_MEANS:
        if pattern.search(name):
            return bounds
    return None


def check_values(name: str, values: np.ndarray) -> List[str]:
    """Problems with one tensor's float values: NaN/Inf, norm means out of range."""
    flat = np.asarray(values).ravel()
    problems = []
    bad = int(flat.size - np.count_nonzero(np.isfinite(flat)))
    if bad:
        problems.append("{}: {} NaN/Inf values".format(name, bad))
        return problems
    bounds = expected_mean(name)
    if bounds is not None and flat.size:
        mean = float(np.mean(flat, dtype=np.float64))
        if not bounds[0] <= mean <= bounds[1]:
            problems.append("{}: mean {:.4g} outside [{}, {}]".format(
                name, mean, bounds[0], bounds[1]))
    return problems


def validate(name: str, values: np.ndarray, force: bool = False,
             report: Optional[QualityReport] = None) -> None:
    """Raise AprError(VALIDATION) for a bad tensor; with `force`, record a warning."""
    problems = check_values(name, values)
    if not problems:
        return
    if not force:
        raise AprError(ErrorCode.VALIDATION, "inline validation failed (use force to "
                       "convert anyway)", tensor=name, problems=problems)
    if report is not None:
        report.warnings.extend(problems)
