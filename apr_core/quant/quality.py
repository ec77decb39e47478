"""Quality of a conversion, per tensor, and the inline validation that guards it.

    measure(name, original, dtype, data, source_dtype, source_bytes) -> TensorQuality
    QualityReport: .add(TensorQuality), .totals(), .to_dict()
    check_values(name, values)        -> problems (list of str), empty when fine
    validate(name, values, force)     -> raises AprError(VALIDATION) unless forced

The report (seed 000 §4.8.4) compares each written tensor, decoded back to float32, with
the float32 values it was made from: RMSE, max |error|, cosine similarity, bits per weight
and bytes before (source storage) and after. Inline validation (seed 000 §10.10, §13.6)
runs as tensors are written: NaN/Inf anywhere, and LayerNorm/RMSNorm weights whose mean is
outside `NORM_MEAN_RANGE`, abort the conversion unless `force` is set (then they are
recorded as warnings).
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode

# (pattern on the tensor name, (low, high) acceptable mean): seed 000 §10.9's table.
EXPECTED_MEANS = (
    (re.compile(r"(norm|layernorm|ln_\w+|layer_norm)\.weight$"), (0.5, 3.0)),
    (re.compile(r"(layer_norm|layernorm)\.bias$"), (-0.5, 0.5)),
)
NORM_MEAN_RANGE = EXPECTED_MEANS[0][1]


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


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity in float64; 1.0 when both are all zero, 0.0 when one is."""
    na, nb = float(np.dot(a, a)), float(np.dot(b, b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / math.sqrt(na * nb))


def measure(name: str, original: np.ndarray, dtype: str, data: bytes, source_dtype: str,
            source_bytes: int) -> TensorQuality:
    """Decode `data` (`dtype` bytes written for `original`) and compare the two."""
    from .api import dequantize
    shape = tuple(int(d) for d in original.shape)
    ref = np.asarray(original, dtype=np.float64).ravel()            # [n]
    got = dequantize(data, dtype, shape).astype(np.float64).ravel()  # [n]
    count = ref.size
    if count:
        diff = got - ref
        rmse = float(np.sqrt(np.mean(diff * diff)))
        max_abs = float(np.max(np.abs(diff)))
    else:
        rmse = max_abs = 0.0
    bpw = 8.0 * len(data) / count if count else 0.0
    return TensorQuality(name, source_dtype, dtype, shape, rmse, max_abs, _cosine(ref, got),
                         bpw, int(source_bytes), len(data))


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
