"""`apr convert MODEL --analyze-source`: the source's tensor statistics against the
expected ranges of seed 000 §10.9, before anything is converted (§4.8.6).

    [PASS] encoder.conv1.weight: mean=0.003 std=0.041
    [FAIL] decoder.layer_norm.weight: LayerNorm weight (gamma) mean 11.2 outside [0.5, 3.0]

Exit 5 when any tensor fails an error-level check (NaN/Inf, norm ranges); a file that
cannot be read fails with its own error code (4 for a corrupt file).
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List

from apr_core.formats.open import open_model
from apr_core.stats import check, logical_tensors, tensor_stats, tensor_values

from ..config import wants_json
from .common import EXIT_OK, EXIT_VALIDATION, emit_json, resolve_model


def run_analyze(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    rows: List[Dict[str, Any]] = []
    with open_model(path) as model:
        for tensor in logical_tensors(model):
            stats = tensor_stats(tensor.name, tensor_values(tensor), tensor.dtype.name)
            findings = check(stats, zero_check=False)
            verdict = "FAIL" if any(f.severity == "error" for f in findings) else \
                "WARN" if findings else "PASS"
            rows.append({"tensor": tensor.name, "verdict": verdict, "mean": stats.mean,
                         "std": stats.std, "findings": [f.message for f in findings]})
    failed = sum(r["verdict"] == "FAIL" for r in rows)
    if wants_json(args):
        emit_json({"input": path, "tensors": rows, "failed": failed})
    else:
        for row in rows:
            detail = "; ".join(row["findings"]) or "mean={:.4g} std={:.4g}".format(
                row["mean"], row["std"])
            print("[{}] {}: {}".format(row["verdict"], row["tensor"], detail))
        print("{} tensors, {} failed".format(len(rows), failed))
    return EXIT_VALIDATION if failed else EXIT_OK
