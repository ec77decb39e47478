"""`apr validate`: is the file intact, are its weights sane, how good is it (seed 000 §4.4).

    apr validate M                 checksums, structure, every tensor decodes
    apr validate M --nan-check     + NaN/Inf in any tensor (fails)
    apr validate M --zero-check    + tensors that are entirely 0.0 (warns)
    apr validate M --stats         + NaN/Inf, zeros and the §10.9 expected ranges
    apr validate M --shapes        + shapes against the family contract, vocabulary sizes
    apr validate M --quality [--min-score N]   everything, as the 100-point score
    apr validate A B --quality     pre/post comparison of two models (§4.8.4)

Exit codes (seed 000 appendix A): 0 valid, 3 missing file, 4 unreadable/damaged structure,
5 checksum mismatch or failed check (or score below --min-score).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from typing import Any, Dict, List, Optional

from apr_core import stats as st
from apr_core.errors import AprError
from apr_core.formats.flags import SIGNED
from apr_core.formats.open import open_model
from apr_core.model.families import resolve_tensors
from apr_core.quant import dequantize
from apr_core.tensor import ModelFile

from . import model_info, quality_score
from .common import EXIT_OK, EXIT_VALIDATION, emit_json, human_bytes, resolve_model
from .render import console, progress, wants_json


# Thresholds of the pre/post comparison (seed 000 §4.8.4), on weights.
MAX_MEAN_DRIFT, MAX_DRIFT, MIN_COSINE = 0.1, 0.5, 0.99


def shape_problems(model: ModelFile, meta: Dict[str, Any]) -> List[str]:
    """Family-contract shapes, and metadata n_vocab / vocabulary vs the embedding rows."""
    tensors = {t.name: t for t in st.logical_tensors(model)}
    problems = []
    found = model_info.family(model, meta)
    if found is not None:
        fam, config = found
        try:
            resolve_tensors(fam, config.source, config.dims(), config.flags(), config.n_layers,
                            tensors)
        except AprError as err:
            problems.append(str(err))
    embedding = next((t for name, t in tensors.items() if re.search(st.EMBEDDING, name)
                      and t.shape), None)
    if embedding is not None:
        rows = embedding.shape[0]
        declared = model_info.declared_vocab_size(meta)
        tokens = model_info.vocab_tokens(meta)
        if declared is not None and declared != rows:
            problems.append("metadata n_vocab {} does not match {} rows {}".format(
                declared, embedding.name, rows))
        if tokens is not None and len(tokens) > rows:
            problems.append("vocabulary has {} tokens but {} has only {} rows".format(
                len(tokens), embedding.name, rows))
    return problems


def validate_file(path: str, nan_check: bool = False, zero_check: bool = False,
                  ranges: bool = False, shapes: bool = False, quality: bool = False
                  ) -> Dict[str, Any]:
    """Open with full verification, decode every tensor, run the requested checks."""
    problems: List[Dict[str, Any]] = []
    findings: List[st.Finding] = []
    shape_issues: List[str] = []
    warnings: List[str] = []
    facts: Dict[str, Any] = {}
    count, exit_code = 0, EXIT_OK
    signature: Optional[Dict[str, Any]] = None
    need_values = nan_check or zero_check or ranges or quality
    try:
        with open_model(path, verify=True) as model:
            for tensor in progress(st.logical_tensors(model), "validating"):
                data = tensor.load()
                count += 1
                if need_values:
                    s = st.tensor_stats(tensor.name, dequantize(data, tensor.dtype, tensor.shape),
                                        tensor.dtype.name)
                    findings += st.check(s, zero_check=zero_check or ranges or quality,
                                         ranges=ranges or quality)
                    if ranges or quality:
                        findings += st.quant_range(tensor.name, tensor.dtype, data)
            warnings = list(getattr(model, "warnings", []) or [])
            signature = _verify_signature(model, path)
            meta = model_info.metadata(model, path)
            if shapes or quality:
                shape_issues = shape_problems(model, meta)
            if quality:
                facts = _facts(model, meta)
    except AprError as err:
        if os.environ.get("APR_LOG_LEVEL", "").lower() == "debug":
            traceback.print_exc()
        problems.append(dict(err.to_dict(), text=str(err)))
        exit_code = err.exit_code
    errors = [f for f in findings if f.severity == "error"]
    valid = not problems and not errors and not shape_issues
    result: Dict[str, Any] = {
        "path": path, "valid": valid, "tensors_checked": count, "problems": problems,
        "warnings": warnings, "findings": [f.to_dict() for f in findings],
        "shape_problems": shape_issues, "signature": signature}
    if quality:
        facts.update(signature=signature is not None and signature["status"] != "unverified",
                     opens=not problems, clean=not problems and not warnings,
                     shapes=not problems and not shape_issues,
                     finite=not problems and not any(f.check == "nan" for f in findings),
                     nonzero=not problems and not any(f.check == "zero" for f in findings),
                     range_errors=sum(f.check == "range" and f.severity == "error"
                                      for f in findings),
                     range_warnings=sum(f.check in ("range", "quant") and
                                        f.severity == "warn" for f in findings))
        result["quality"] = quality_score.score(facts)
    result["exit_code"] = exit_code if problems else (EXIT_OK if valid else EXIT_VALIDATION)
    return result


def _verify_signature(model: ModelFile, path: str) -> Optional[Dict[str, Any]]:
    """None when unsigned; else the Ed25519 check of the embedded key (integrity, not
    provenance: APR_TRUSTED_KEY / open_model pin the signer), AprError(E006) if it fails."""
    if not getattr(model, "flags", 0) & SIGNED:
        return None
    try:
        from apr_core.formats.apr2_sign import verify_apr2
    except ImportError:   # a build without the signing module: the flag is all we know
        return {"status": "unverified"}
    return verify_apr2(path)


def _facts(model: ModelFile, meta: Dict[str, Any]) -> Dict[str, Any]:
    """Container and metadata facts for the score (opened and verified already)."""
    return {"aligned": all(t.offset % 32 == 0 for t in model.tensors.values()),
            "checksum": model.format.startswith("apr2"),
            "no_code": model.format in ("apr2", "apr2-sharded", "gguf", "safetensors"),
            "architecture": model_info.family(model, meta) is not None,
            "vocab": model_info.vocab_tokens(meta) is not None,
            "name": model_info.meta_value(meta, "name") is not None,
            "license": model_info.meta_value(meta, "license") is not None,
            "provenance": model_info.meta_value(meta, "provenance") is not None or
            model_info.meta_value(meta, "model_card") is not None}


def run_validate(args: argparse.Namespace) -> int:
    if len(args.model) > 2:
        from apr_core.errors import ErrorCode
        raise AprError(ErrorCode.ARGUMENT, "validate takes one model, or two to compare")
    if len(args.model) == 2:
        return _run_compare(args)
    path = resolve_model(args.model[0])
    result = validate_file(path, nan_check=args.nan_check, zero_check=args.zero_check,
                           ranges=args.stats, shapes=args.shapes, quality=args.quality)
    code = result["exit_code"]
    if args.quality and args.min_score is not None and code == EXIT_OK and \
            result["quality"]["total"] < args.min_score:
        code = EXIT_VALIDATION
    result["exit_code"] = code
    if wants_json(args):
        emit_json(result)
    else:
        _print_result(result, args)
    if result["problems"]:   # the one-line message every command gives for a bad file
        print("apr: error: {}".format(result["problems"][0]["text"]), file=sys.stderr)
    return code


def _print_result(result: Dict[str, Any], args: argparse.Namespace) -> None:
    out = console()
    for warning in result["warnings"]:
        out.print("warning: {}".format(warning))
    for finding in result["findings"]:
        out.print("[{}] {}: {}".format("FAIL" if finding["severity"] == "error" else "WARN",
                                       finding["tensor"], finding["message"]))
    for problem in result["shape_problems"]:
        out.print("[FAIL] shapes: {}".format(problem))
    if args.quality and "quality" in result:
        q = result["quality"]
        out.print("=== 100-Point Quality Assessment ===")
        out.print("")
        for category in quality_score.CATEGORIES:
            out.print("{:24s}{:>2d}/25".format("{} (25 pts):".format(category.title()),
                                               q["categories"][category]))
        for check in q["checks"]:
            if check["points"] < check["max"]:
                out.print("  -{} {}: {}".format(check["max"] - check["points"], check["check"],
                                                check["description"]))
        out.print("")
        out.print("TOTAL: {}/100 ({})".format(q["total"], q["grade"]))
        if args.min_score is not None and q["total"] < args.min_score:
            out.print("FAIL: score below --min-score {}".format(args.min_score))
    if result["problems"]:
        first = result["problems"][0]
        out.print("INVALID: {} {}".format(first["code"], first["message"]))
    elif result["valid"]:
        out.print("VALID: {} tensors checked".format(result["tensors_checked"]))
    else:
        out.print("INVALID: {} failed check(s)".format(
            sum(f["severity"] == "error" for f in result["findings"]) +
            len(result["shape_problems"])))


def compare_files(path_a: str, path_b: str) -> Dict[str, Any]:
    """Pre/post comparison: counts, non-zero parameters, sizes, weight drift, verdict."""
    from .diff_cmd import compare_models
    sides = []
    with open_model(path_a, verify=True) as a, open_model(path_b, verify=True) as b:
        for path, model in ((path_a, a), (path_b, b)):
            tensors = st.logical_tensors(model)
            nonzero = 0
            for t in tensors:
                s = st.tensor_stats(t.name, st.tensor_values(t))
                nonzero += s.count - s.zeros
            sides.append({"path": path, "tensors": len(tensors),
                          "params": sum(_count(t.shape) for t in tensors), "nonzero": nonzero,
                          "size": os.path.getsize(path) if os.path.isfile(path) else None})
        diff = compare_models(a, b, "auto", (path_a, path_b))
    rows = [r for r in diff["tensors"] if r["drift"] is not None]
    drifts = [r["drift"] for r in rows]
    mean_drift = sum(drifts) / len(drifts) if drifts else 0.0
    max_drift = max(drifts) if drifts else 0.0
    min_cos = min([r["cosine"] for r in rows] or [1.0])
    checks = {"mean_drift": mean_drift <= MAX_MEAN_DRIFT, "max_drift": max_drift <= MAX_DRIFT,
              "cosine": min_cos >= MIN_COSINE,
              "same_tensors": not diff["only_in_a"] and not diff["only_in_b"] and
              all(r["status"] != "SHAPE" for r in diff["tensors"])}
    worst = sorted(rows, key=lambda r: -r["drift"])[:5]
    return {"original": sides[0], "optimized": sides[1], "mean_drift": mean_drift,
            "max_drift": max_drift, "min_cosine": min_cos, "checks": checks,
            "compared": len(rows),
            "pass": all(checks.values()), "similarity": diff["similarity"],
            "worst": [{"tensor": r["a"], "drift": r["drift"], "cosine": r["cosine"]}
                      for r in worst]}


def _count(shape: Any) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _run_compare(args: argparse.Namespace) -> int:
    path_a, path_b = resolve_model(args.model[0]), resolve_model(args.model[1])
    report = compare_files(path_a, path_b)
    code = EXIT_OK if report["pass"] else EXIT_VALIDATION
    if wants_json(args):
        emit_json(report)
        return code
    a, b = report["original"], report["optimized"]
    out = console()
    out.print("Quality Comparison: {} vs {}".format(path_a, path_b))
    out.print("=" * 63)
    out.print("{:26s}{:>12s}{:>12s}{:>10s}".format("", "Original", "Optimized", "Δ"))
    for label, key, fmt in (("Tensor count", "tensors", "{:,}"), ("Total params", "params",
                                                                 "{:,}"),
                            ("Non-zero params", "nonzero", "{:,}"), ("Size", "size", None)):
        va, vb = a[key], b[key]
        delta = "{:+.0f}%".format(100.0 * (vb - va) / va) if va else "0"
        show = (lambda v: human_bytes(v)) if fmt is None else fmt.format
        out.print("{:26s}{:>12s}{:>12s}{:>10s}".format(label, show(va), show(vb), delta))
    out.print("")
    out.print("Weight Comparison ({} matched tensors):".format(report["compared"]))
    mark = {True: "✓ PASS", False: "✗ FAIL"}
    out.print("  Mean L2 drift:          {:.4f}      (threshold: {})  {}".format(
        report["mean_drift"], MAX_MEAN_DRIFT, mark[report["checks"]["mean_drift"]]))
    out.print("  Max L2 drift:           {:.4f}      (threshold: {})  {}".format(
        report["max_drift"], MAX_DRIFT, mark[report["checks"]["max_drift"]]))
    out.print("  Cosine similarity:      {:.4f}      (threshold: {}) {}".format(
        report["min_cosine"], MIN_COSINE, mark[report["checks"]["cosine"]]))
    if report["worst"]:
        out.print("")
        out.print("Layer-by-layer drift (highest first):")
        for i, row in enumerate(report["worst"]):
            out.print("  {:40s} {:.4f}  {}".format(row["tensor"] + ":", row["drift"],
                                                   "⚠ (highest drift)" if i == 0 else "✓"))
    out.print("")
    out.print("VERDICT: {}".format("✓ PASS - optimized model within quality tolerance"
                                   if report["pass"] else "✗ FAIL - quality degraded"))
    return code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="verify checksums and structure, decode every tensor; "
                       "optional NaN/zero/shape/statistics checks and a 100-point score")
    p.add_argument("model", nargs="+", help="model file; two files compare pre/post quality")
    p.add_argument("--checksum", action="store_true", help="(always on) verify checksums")
    p.add_argument("--nan-check", action="store_true", help="fail on NaN/Inf values")
    p.add_argument("--zero-check", action="store_true", help="warn on all-zero tensors")
    p.add_argument("--stats", action="store_true",
                   help="NaN/Inf, zeros and the expected-range rules (seed 000 §10.9)")
    p.add_argument("--shapes", action="store_true",
                   help="shapes vs the family contract; n_vocab vs the embedding")
    p.add_argument("--quality", action="store_true", help="100-point quality score")
    p.add_argument("--min-score", type=int, help="with --quality: exit 5 below this score")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_validate)
