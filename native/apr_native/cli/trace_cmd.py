"""`apr trace MODEL [PROMPT]`: follow a prompt through the model layer by layer (seed 000
§4.8.5 and §4.10): per step the hidden states' shape, statistics and time, anomalies
(`--detect-anomalies`), the payload values (`--payload`), the model's top predictions, a
step-by-step comparison with a second model (`--diff`) and a JSON export (`--export`).
The steps are named as llama.cpp names the tensors that produce them (token_embd, blk.N,
output_norm), so a trace lines up with a GGUF's tensor list.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List

import numpy as np

from apr_core.errors import AprError, ErrorCode

from .common import EXIT_OK, EXIT_VALIDATION, check_output, emit_json


DEFAULT_PROMPT = "The capital of France is"


def _top(model: Any, hidden_last: np.ndarray, count: int) -> List[Dict[str, Any]]:
    """The `count` most likely next tokens after the prompt, with probabilities."""
    logits = model.transformer.lm_head.matmul(hidden_last[None, :])[0].astype(np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs)[:count]
    return [{"id": int(i), "text": model.tokenizer.decode([int(i)]), "prob": float(probs[i])}
            for i in order]


def _load(path: str, args: argparse.Namespace) -> Any:
    from .run_cmd import load
    return load(args, model=path).model


def run_trace(args: argparse.Namespace) -> int:
    from apr_core.trace import ANOMALY_RULES, trace, trace_diff
    if args.export:
        check_output(args.export, args.force)
    started = time.perf_counter()
    model = _load(args.model, args)
    ids = model.prompt_ids(args.prompt, chat=args.chat)
    steps = trace(model.transformer, ids, keep_values=True)
    report: Dict[str, Any] = {
        "model": args.model, "prompt": args.prompt, "tokens": len(ids),
        "backend": model.transformer.kernels.backend,
        "steps": [s.to_dict() for s in steps],
        "top": _top(model, steps[-1].values[-1], args.top),
        "anomalies": [{"step": s.name, "rule": rule} for s in steps for rule in s.anomalies],
    }
    if args.diff:
        other = _load(args.diff, args)
        if other.transformer.config.n_layers != model.transformer.config.n_layers:
            raise AprError(ErrorCode.ARGUMENT, "--diff needs a model with the same layers",
                           layers=model.transformer.config.n_layers,
                           other=other.transformer.config.n_layers)
        report["diff"] = trace_diff(steps, trace(other.transformer, ids, keep_values=True))
        report["diff"]["model"] = args.diff
    report["total_ms"] = (time.perf_counter() - started) * 1e3
    if args.export:
        from apr_core.atomic import atomic_output
        with atomic_output(args.export) as handle:
            handle.write(json.dumps(report, indent=1).encode("utf-8"))
    code = EXIT_VALIDATION if args.detect_anomalies and report["anomalies"] else EXIT_OK
    if args.json:
        emit_json(report)
    else:
        _print(report, args, {rule: text for rule, _, text in ANOMALY_RULES})
    return code


def _print(report: Dict[str, Any], args: argparse.Namespace, meanings: Dict[str, str]) -> None:
    from .render import print_table
    print("Payload trace: {!r} -> {} ({} tokens)".format(report["prompt"], report["model"],
                                                         report["tokens"]))
    rows = []
    for number, step in enumerate(report["steps"], 1):
        flags = " ".join("!" + rule for rule in step["anomalies"]) if (
            args.detect_anomalies or step["anomalies"]) else ""
        rows.append([number, step["name"], "x".join(str(d) for d in step["shape"]),
                     step["mean"], step["std"], step["min"], step["max"], step["rms"],
                     step["ms"], flags])
    print_table("", ["step", "layer", "shape", "mean", "std", "min", "max", "rms", "ms",
                     "anomalies"], rows, right=["step", "mean", "std", "min", "max", "rms", "ms"])
    if args.payload:
        for step in report["steps"]:
            print("  {:<12s} [{}, ...]".format(step["name"], ", ".join(
                "{:.4g}".format(v) for v in step["payload"])))
    for anomaly in report["anomalies"]:
        print("ANOMALY at {}: {}".format(anomaly["step"], meanings[anomaly["rule"]]))
    if args.detect_anomalies and not report["anomalies"]:
        print("No anomalies in {} steps".format(len(report["steps"])))
    print("Top predictions:")
    for rank, item in enumerate(report["top"], 1):
        print("  {}. {!r} ({:.4f})".format(rank, item["text"], item["prob"]))
    if "diff" in report:
        diff = report["diff"]
        print_table("Trace diff: {} vs {}".format(report["model"], diff["model"]),
                    ["layer", "drift", "cosine"],
                    [[r["step"], r["drift"], r["cosine"]] for r in diff["steps"]],
                    right=["drift", "cosine"])
        print("Divergence detected at: {}".format(diff["diverged_at"]) if diff["diverged_at"]
              else "No divergence (every step's drift <= {})".format(diff["threshold"]))
    print("Total time: {:.1f} ms".format(report["total_ms"]))


def register(sub: argparse._SubParsersAction) -> None:
    from .run_cmd import add_runtime_arguments
    p = sub.add_parser("trace", help="follow a prompt through the model layer by layer: "
                       "statistics, timing, anomalies, a diff against another model")
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    p.add_argument("--payload", action="store_true",
                   help="print each step's first values (last position)")
    p.add_argument("--detect-anomalies", action="store_true",
                   help="list anomalies (NaN/Inf, dead values, RMS spikes); exit 5 if any")
    p.add_argument("--diff", metavar="MODEL2", help="trace MODEL2 too and compare step by step")
    p.add_argument("--export", metavar="TRACE.json", help="write the whole trace as JSON")
    p.add_argument("-f", "--force", action="store_true", help="overwrite --export's file")
    p.add_argument("--top", type=int, default=5, help="top predictions to show (default 5)")
    add_runtime_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_trace)
