"""Tensor statistics, NaN/Inf/zero checks and the expected-range rules (seed 000 §10.9).

    logical_tensors(model)        -> [LazyTensor]: block types a SafeTensors export packed
                                     as U8 restored, so every format shows the same tensors
    tensor_values(tensor)         -> float32 array of tensor.shape (dequantized)
    tensor_stats(name, values)    -> TensorStats: count, mean, std, min, max, NaN/Inf/zeros
    check(stats)                  -> [Finding]: NaN/Inf, all-zero, rule violations
    quant_range(name, dtype, data) -> [Finding]: symmetric quants outside [-127, 127]
    histogram(values, bins)       -> (counts, edges) over the finite values
    RULES                            THE table of expected ranges (the inline validation of
                                     `quant.quality` uses its "error" rows)

Sums are float64 over chunks, so the same values give the same numbers whichever file
format (APR, GGUF, SafeTensors) they were read from.
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, List, NamedTuple, Optional, Pattern, Tuple

import numpy as np

from .tensor import LazyTensor, ModelFile

# Elements per summing step: float64 scratch of 64 Ki elements stays in L2.
CHUNK = 1 << 16


class Rule(NamedTuple):
    """`stat` (mean or std) of a tensor whose name matches `pattern` lies in [low, high].

    `severity` "error" fails validation (and aborts a conversion, `quant.quality`);
    "warn" is reported. The first matching rule per stat applies."""

    pattern: Pattern[str]
    stat: str
    low: float
    high: float
    severity: str
    label: str


_LINEAR = (r"(q_proj|k_proj|v_proj|o_proj|out_proj|fc1|fc2|gate_proj|up_proj|down_proj|"
           r"attn_q|attn_k|attn_v|attn_output|ffn_up|ffn_down|ffn_gate|c_attn|c_proj|c_fc|"
           r"query|key|value)\.weight$")
# Token-embedding names (GGUF, HF, Whisper/APR, GPT-2, BERT).
EMBEDDING = r"(token_embd\.weight|embed_tokens\.weight|token_embedding|wte\.weight|" \
             r"word_embeddings\.weight)$"

# THE expected-range table. LayerNorm rows are seed 000 §10.9. RMSNorm weights (GGUF
# `*_norm.weight`, HF `*layernorm.weight`, `model.norm.weight`) are far from 1 in real
# models -- SmolLM2-135M has means 0.001 (blk.0.attn_norm) to 1.80, Qwen2.5-0.5B 0.031 to
# 7.23 (output_norm) -- so their range only catches the seed's failure mode (a scaled norm,
# mean ~11). Linear and embedding rows are warnings: §10.9 gives them as expectations
# ("should"), and seed 000 §11 #30/#35 ask for a warning (embedding std < 0.2, linear
# mean ~0); real trained weights have |mean| < 0.01 (see tests/conversion/test_stats.py).
RULES = (
    Rule(re.compile(r"(layer_norm|LayerNorm)\.weight$"), "mean", 0.5, 3.0, "error",
         "LayerNorm weight (gamma)"),
    Rule(re.compile(r"(layer_norm|LayerNorm)\.bias$"), "mean", -0.5, 0.5, "error",
         "LayerNorm bias (beta)"),
    Rule(re.compile(r"norm\.weight$"), "mean", -1.0, 10.0, "error", "RMSNorm weight"),
    Rule(re.compile(_LINEAR), "mean", -0.1, 0.1, "warn", "attention/linear weight"),
    Rule(re.compile(EMBEDDING), "mean", -0.1, 0.1, "warn", "token embedding"),
    Rule(re.compile(EMBEDDING), "std", 0.0, 0.2, "warn", "token embedding"),
)


def expected_range(name: str, stat: str = "mean",
                   severities: Tuple[str, ...] = ("error", "warn")) -> Optional[Rule]:
    """The first rule of `severities` for `stat` whose pattern matches `name`, or None."""
    for rule in RULES:
        if rule.stat == stat and rule.severity in severities and rule.pattern.search(name):
            return rule
    return None


class TensorStats(NamedTuple):
    """Statistics of one tensor's float values; mean/std/min/max over finite values."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    count: int
    mean: float
    std: float
    min: float
    max: float
    l2: float        # Euclidean norm of the finite values
    nan: int
    inf: int
    zeros: int

    def to_dict(self) -> Dict[str, Any]:
        out = self._asdict()
        out["shape"] = list(self.shape)
        return out


class Finding(NamedTuple):
    """One problem with one tensor: severity "error" or "warn", a check id, a message."""

    tensor: str
    severity: str
    check: str
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return self._asdict()


def logical_tensors(model: ModelFile) -> List[LazyTensor]:
    """The model's tensors as the APR hub sees them (packed SafeTensors blocks restored)."""
    from .formats.logical import apr_metadata, unpack_tensors
    return unpack_tensors(model, apr_metadata(model))


def tensor_values(tensor: Any) -> np.ndarray:
    """float32 values of a tensor (anything with name, dtype, shape, load())."""
    from .quant import dequantize
    return dequantize(tensor.load(), tensor.dtype, tensor.shape)


def tensor_stats(name: str, values: np.ndarray, dtype: str = "F32") -> TensorStats:
    """Statistics of `values` in float64, chunk by chunk."""
    shape = tuple(int(d) for d in np.shape(values))
    flat = np.asarray(values).reshape(-1)
    n_finite = nan = inf = zeros = 0
    s1 = s2 = 0.0
    lo, hi = math.inf, -math.inf
    for start in range(0, flat.size, CHUNK):
        chunk = flat[start:start + CHUNK].astype(np.float64)           # [chunk]
        finite = np.isfinite(chunk)
        n_ok = int(np.count_nonzero(finite))
        if n_ok != chunk.size:
            n_nan = int(np.count_nonzero(np.isnan(chunk)))
            nan, inf = nan + n_nan, inf + chunk.size - n_ok - n_nan
            chunk = chunk[finite]
        n_finite += n_ok
        zeros += int(chunk.size - np.count_nonzero(chunk))
        if chunk.size:
            s1 += float(np.sum(chunk))
            s2 += float(np.einsum("i,i->", chunk, chunk))
            lo, hi = min(lo, float(chunk.min())), max(hi, float(chunk.max()))
    mean = s1 / n_finite if n_finite else 0.0
    var = max(s2 / n_finite - mean * mean, 0.0) if n_finite else 0.0
    if not n_finite:
        lo = hi = 0.0
    return TensorStats(name, dtype, shape, int(flat.size), mean, math.sqrt(var), lo, hi,
                       math.sqrt(s2), nan, inf, zeros)


def model_stats(model: ModelFile, names: Optional[List[str]] = None) -> List[TensorStats]:
    """TensorStats of every tensor of `model` (or those in `names`), in file order."""
    out = []
    for tensor in logical_tensors(model):
        if names is None or tensor.name in names:
            out.append(tensor_stats(tensor.name, tensor_values(tensor), tensor.dtype.name))
    return out


def check(stats: TensorStats, zero_check: bool = True, ranges: bool = True) -> List[Finding]:
    """Findings for one tensor: NaN/Inf (error), all-zero (warn), RULES violations."""
    out: List[Finding] = []
    if stats.nan or stats.inf:
        out.append(Finding(stats.name, "error", "nan", "{} NaN and {} Inf values".format(
            stats.nan, stats.inf)))
    if zero_check and stats.count and stats.zeros == stats.count:
        out.append(Finding(stats.name, "warn", "zero", "every value is 0.0"))
    if ranges and stats.count:
        for stat in ("mean", "std"):
            rule = expected_range(stats.name, stat)
            value = getattr(stats, stat)
            if rule is not None and not rule.low <= value <= rule.high:
                out.append(Finding(stats.name, rule.severity, "range",
                                   "{} {} {:.4g} outside [{}, {}]".format(
                                       rule.label, stat, value, rule.low, rule.high)))
    return out


# Symmetric block types whose quants a reference quantizer keeps inside [-127, 127]
# (llama.cpp: d = amax / 127): dtype -> (byte offset of the int8 quants in a block, count).
# A -128 means a foreign or damaged quantizer (seed 000 §11 #34).
SYMMETRIC_QUANTS = {"Q8_0": (2, 32)}


def quant_range(name: str, dtype: Any, data: bytes) -> List[Finding]:
    """A warning when a symmetric block type holds the quant -128 (raw bytes, no decoding)."""
    layout = SYMMETRIC_QUANTS.get(dtype.name)
    if layout is None:
        return []
    start, count = layout
    blocks = np.frombuffer(data, np.uint8).reshape(-1, dtype.type_size)
    quants = blocks[:, start:start + count].view(np.int8)              # [n_blocks, count]
    low = int(np.count_nonzero(quants == -128))
    if not low:
        return []
    return [Finding(name, "warn", "quant", "{} quant(s) of -128 outside the symmetric "
                    "range [-127, 127]".format(low))]


def histogram(values: np.ndarray, bins: int = 40) -> Tuple[np.ndarray, np.ndarray]:
    """(counts [bins], edges [bins + 1]) of the finite values."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    flat = flat[np.isfinite(flat)]
    if not flat.size:
        return np.zeros(bins, np.int64), np.zeros(bins + 1)
    lo, hi = float(flat.min()), float(flat.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.histogram(flat, bins=bins, range=(lo, hi))


__all__ = ["Rule", "RULES", "EMBEDDING", "expected_range", "TensorStats", "Finding",
           "logical_tensors", "tensor_values", "tensor_stats", "model_stats", "check",
           "SYMMETRIC_QUANTS", "quant_range", "histogram"]
