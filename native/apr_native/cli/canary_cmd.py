"""`apr canary create|check` (seed 000 §4.14): regression testing by tensor statistics.

    apr canary create MODEL -o canary.json [--input PROMPT ...] [--max-tokens N]
    apr canary check MODEL --canary canary.json

`create` records every tensor's shape, count, mean, std, min and max (float64 sums, the
same numbers whichever format the tensor comes from), and for each `--input` prompt the
greedy completion of a text model. `check` fails (exit 5) when, per §4.14.3:
a tensor is missing, its shape differs, its mean drifts more than 10 % or its std more
than 20 % (relative to the recorded value), or a recorded completion is not reproduced
token for token (`--min-token-accuracy`, default 1.0).

Relative drift of a mean near zero is undefined, so the mean's denominator is
max(|old mean|, 0.1 * old std): a zero-mean weight matrix fails when its mean moves by
more than 1 % of its spread, which still catches every scaling or mapping bug of §10.11.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.json_files import read_json_file
from apr_core.formats.open import open_model
from apr_core.stats import logical_tensors, tensor_stats, tensor_values

from ..config import wants_json
from .common import EXIT_OK, EXIT_VALIDATION, check_output, emit_json, resolve_model


MEAN_DRIFT = 0.10
STD_DRIFT = 0.20
NEAR_ZERO_MEAN = 0.1     # the mean's denominator is at least this fraction of the std


def snapshot(path: str) -> Dict[str, Dict[str, Any]]:
    """{tensor: {shape, count, mean, std, min, max}} for every tensor of `path`."""
    out = {}
    with open_model(path) as model:
        for tensor in logical_tensors(model):
            s = tensor_stats(tensor.name, tensor_values(tensor), tensor.dtype.name)
            out[tensor.name] = {"shape": list(s.shape), "count": s.count, "mean": s.mean,
                                "std": s.std, "min": s.min, "max": s.max}
    return out


def drift(old: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, float]:
    """Relative mean and std drift of one tensor (see the module docstring)."""
    mean_den = max(abs(old["mean"]), NEAR_ZERO_MEAN * old["std"])
    mean = abs(new["mean"] - old["mean"]) / mean_den if mean_den > 0 else \
        (0.0 if new["mean"] == old["mean"] else float("inf"))
    std = abs(new["std"] - old["std"]) / old["std"] if old["std"] > 0 else \
        (0.0 if new["std"] == 0 else float("inf"))
    return {"mean": mean, "std": std}


def compare(reference: Dict[str, Dict[str, Any]], current: Dict[str, Dict[str, Any]],
            mean_limit: float = MEAN_DRIFT, std_limit: float = STD_DRIFT
            ) -> List[Dict[str, Any]]:
    """One row per reference tensor: passed, and the reasons it failed. When the two
    sides name tensors differently (a GGUF canary, an HF-named model), both are paired
    through their canonical APR names first."""
    if set(reference) != set(current):
        from .tensor_map import canonical_names
        ref_names, cur_names = canonical_names(list(reference)), canonical_names(list(current))
        if set(ref_names.values()) == set(cur_names.values()):
            back = {canon: name for name, canon in cur_names.items()}
            current = {name: current[back[ref_names[name]]] for name in reference}
    rows = []
    for name, old in sorted(reference.items()):
        new = current.get(name)
        reasons = []
        if new is None:
            reasons.append("tensor missing from model")
        elif list(new["shape"]) != list(old["shape"]):
            reasons.append("shape {} != {}".format(new["shape"], old["shape"]))
        else:
            d = drift(old, new)
            if d["mean"] > mean_limit:
                reasons.append("Mean drift {:.1f}% exceeds threshold {:.1f}%".format(
                    100 * d["mean"], 100 * mean_limit))
            if d["std"] > std_limit:
                reasons.append("Std drift {:.1f}% exceeds threshold {:.1f}%".format(
                    100 * d["std"], 100 * std_limit))
        rows.append({"tensor": name, "passed": not reasons, "reasons": reasons})
    return rows


def _complete(path: str, prompts: List[str], max_tokens: int
              ) -> Tuple[List[Dict[str, Any]], str]:
    """Each prompt's greedy completion, and the backend that computed them."""
    from ..engine import load_engine
    engine = load_engine(path)
    out = []
    for prompt in prompts:
        ids = engine.model.prompt_ids(prompt)
        gen = engine.generate(ids, max_tokens=max_tokens)
        out.append({"prompt": prompt, "max_tokens": max_tokens, "tokens": gen.token_ids,
                    "text": gen.text})
    return out, engine.backend


def run_create(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    check_output(args.output, args.force)
    tensors = snapshot(path)
    canary: Dict[str, Any] = {
        "model_name": os.path.basename(path), "tensor_count": len(tensors),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "thresholds": {"mean_drift": MEAN_DRIFT, "std_drift": STD_DRIFT},
        "tensors": tensors}
    if args.input:
        canary["inputs"], canary["backend"] = _complete(path, args.input, args.max_tokens)
    from apr_core.atomic import atomic_output
    with atomic_output(args.output) as handle:
        handle.write(json.dumps(canary, indent=1).encode("utf-8"))
    if wants_json(args):
        emit_json({"model": path, "output": args.output, "tensors": len(tensors),
                   "inputs": len(canary.get("inputs", [])), "backend": canary.get("backend")})
    else:
        print("Tensors captured: {}\nOutput file: {}\nCanary test created successfully"
              .format(len(tensors), args.output))
    return EXIT_OK


def _load_canary(path: str) -> Dict[str, Any]:
    data = read_json_file(path, "canary file")
    if not isinstance(data.get("tensors"), dict):
        raise AprError(ErrorCode.FORMAT, "canary file has no tensors table", path=path)
    return data


def run_check(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    canary = _load_canary(args.canary)
    rows = compare(canary["tensors"], snapshot(path), args.mean_threshold, args.std_threshold)
    inputs, backend, recorded_inputs = [], None, canary.get("inputs") or []
    completions: List[Dict[str, Any]] = []
    if recorded_inputs:
        completions, backend = _complete(
            path, [c["prompt"] for c in recorded_inputs],
            max(c.get("max_tokens", 8) for c in recorded_inputs))
    for recorded, got in zip(recorded_inputs, completions):
        want, have = recorded["tokens"], got["tokens"]
        same = sum(a == b for a, b in zip(want, have))
        accuracy = same / max(len(want), len(have), 1)
        inputs.append({"prompt": recorded["prompt"], "expected": recorded["text"],
                       "got": got["text"], "token_accuracy": accuracy,
                       "passed": accuracy >= args.min_token_accuracy})
    failed = sum(not r["passed"] for r in rows) + sum(not i["passed"] for i in inputs)
    if wants_json(args):
        emit_json({"model": path, "canary": args.canary, "passed": not failed,
                   "tensors": rows, "inputs": inputs, "backend": backend})
    else:
        for row in rows:
            if not row["passed"] or args.verbose:
                print("[{}] {}".format("PASS" if row["passed"] else "FAIL", row["tensor"]))
                for reason in row["reasons"]:
                    print("       {}".format(reason))
        for item in inputs:
            print("[{}] input {!r}: expected {!r} got {!r} (token accuracy {:.0%})".format(
                "PASS" if item["passed"] else "FAIL", item["prompt"], item["expected"],
                item["got"], item["token_accuracy"]))
        passed = sum(r["passed"] for r in rows)
        print("Results: {} passed, {} failed out of {} tensors".format(
            passed, len(rows) - passed, len(rows)))
        print("Canary check {}".format("PASSED" if not failed else
                                       "FAILED - model drifted beyond tolerance"),
              file=sys.stdout)
    return EXIT_VALIDATION if failed else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("canary", help="regression canaries: tensor statistics snapshots")
    inner = p.add_subparsers(dest="canary_command", metavar="SUBCOMMAND")
    c = inner.add_parser("create", help="snapshot a model's tensor statistics")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True, help="canary JSON to write")
    c.add_argument("--input", action="append",
                   help="a prompt whose greedy completion is recorded (repeatable)")
    c.add_argument("--max-tokens", type=int, default=8)
    c.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=run_create)
    k = inner.add_parser("check", help="check a model against a canary")
    k.add_argument("model")
    k.add_argument("--canary", required=True)
    k.add_argument("--mean-threshold", type=float, default=MEAN_DRIFT)
    k.add_argument("--std-threshold", type=float, default=STD_DRIFT)
    k.add_argument("--min-token-accuracy", type=float, default=1.0)
    k.add_argument("-v", "--verbose", action="store_true", help="list passing tensors too")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=run_check)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
