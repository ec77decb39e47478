"""`apr rosetta`: the universal format converter and its checks (seed 004 §2.7, §10).

    inspect FILE [--hexdump]          format (by magic) and every tensor's dtype and shape
    convert IN OUT                    any format -> any format (apr_core convert())
    chain "st -> apr -> gguf" --input FILE [-o OUT]   the steps in turn, each validated inline
    verify A B [--tolerance T]        every tensor present on both sides within T (exit 5)
    fingerprint FILE [-o JSON]        per-tensor sha256 of the logical bytes + statistics
    validate-stats FILE --reference JSON   statistics against a fingerprint (canary rules)
    diff-tensors A B [--filter S]     per-tensor comparison across naming conventions,
                                      flagging transposed layouts ([in, out] vs [out, in])

Names are paired across conventions (GGUF vs HF vs canonical APR) through
`apr_core.name_maps`, so an APR file and the GGUF or SafeTensors it came from compare
tensor by tensor.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any, Dict, List

from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import FORMAT_BY_EXTENSION, convert
from apr_core.formats.open import open_model
from apr_core.stats import logical_tensors, tensor_stats, tensor_values

from ..config import wants_json
from . import canary_cmd
from .common import EXIT_OK, EXIT_VALIDATION, check_output, emit_json, resolve_model
from .diff_cmd import compare_models


# Chain step spellings -> format names.
STEP_FORMATS = {"st": "safetensors", "safetensors": "safetensors", "apr": "apr",
                "gguf": "gguf"}
EXTENSIONS = {fmt: ext for ext, fmt in FORMAT_BY_EXTENSION.items()}


def _format_of(model: Any) -> str:
    return {"apr2": "apr"}.get(model.format, model.format)


def run_inspect(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with open_model(path, verify=False) as model:
        rows = [{"name": t.name, "dtype": t.dtype.name, "shape": list(t.shape)}
                for t in logical_tensors(model)]
        fmt = _format_of(model)
    head = b""
    if args.hexdump and os.path.isfile(path):
        with open(path, "rb") as handle:
            head = handle.read(args.hexdump_bytes)
    if wants_json(args):
        emit_json({"path": path, "format": fmt, "tensor_count": len(rows), "tensors": rows,
                   "head_hex": head.hex() if head else None})
        return EXIT_OK
    print("{}: {} ({} tensors)".format(path, fmt, len(rows)))
    for row in rows:
        print("  {:<48} {:<6} {}".format(row["name"], row["dtype"], row["shape"]))
    for offset in range(0, len(head), 16):
        chunk = head[offset:offset + 16]
        print("{:08x}  {:<48} {}".format(offset, " ".join("{:02x}".format(b) for b in chunk),
                                         "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)))
    return EXIT_OK


def _convert(source: str, dest: str, force: bool) -> int:
    check_output(dest, force)
    convert(source, dest, None, overwrite=True, force=False,
            progress=lambda name, done, total: None)   # inline validation on every step
    with open_model(dest) as model:
        return len(model.tensors)


def run_convert(args: argparse.Namespace) -> int:
    path = resolve_model(args.source)
    count = _convert(path, args.dest, args.force)
    if wants_json(args):
        emit_json({"input": path, "output": args.dest, "tensors": count})
    else:
        print("{} -> {} ({} tensors)".format(path, args.dest, count))
    return EXIT_OK


def parse_chain(text: str) -> List[str]:
    steps = [s.strip().lower() for s in text.replace("->", ">").split(">")]
    if len(steps) < 2 or any(s not in STEP_FORMATS for s in steps):
        raise AprError(ErrorCode.ARGUMENT, "a chain is formats joined by '->', e.g. "
                       "'st -> apr -> gguf'", chain=text, formats=sorted(STEP_FORMATS))
    return [STEP_FORMATS[s] for s in steps]


def run_chain(args: argparse.Namespace) -> int:
    steps = parse_chain(args.chain)
    current = resolve_model(args.input)
    with open_model(current, verify=False) as model:
        first = _format_of(model)
        counts = [len(model.tensors)]
    if first != steps[0]:
        raise AprError(ErrorCode.ARGUMENT, "the chain starts with another format than the "
                       "input's", chain=args.chain, input_format=first)
    stem = os.path.splitext(os.path.basename(os.path.normpath(current)))[0]
    work = args.work_dir or os.path.dirname(os.path.abspath(args.output or current))
    outputs = []
    for index, fmt in enumerate(steps[1:], 1):
        last = index == len(steps) - 1
        dest = args.output if last and args.output else os.path.join(
            work, "{}.step{}{}".format(stem, index, EXTENSIONS[fmt]))
        counts.append(_convert(current, dest, args.force))
        outputs.append(dest)
        current = dest
    if len(set(counts)) != 1:
        raise AprError(ErrorCode.VALIDATION, "tensor count changed along the chain",
                       counts=counts)
    if wants_json(args):
        emit_json({"chain": steps, "outputs": outputs, "tensor_counts": counts})
    else:
        for fmt, out, count in zip(steps[1:], outputs, counts[1:]):
            print("{:<12} {} ({} tensors)".format(fmt, out, count))
    return EXIT_OK


def _compare(path_a: str, path_b: str) -> Dict[str, Any]:
    with open_model(path_a) as a, open_model(path_b) as b:
        return compare_models(a, b, "auto")


def run_verify(args: argparse.Namespace) -> int:
    result = _compare(resolve_model(args.model_a), resolve_model(args.model_b))
    bad = [r for r in result["tensors"] if r["max_delta"] is None or
           r["max_delta"] > args.tolerance]
    ok = not bad and not result["only_in_a"] and not result["only_in_b"]
    if wants_json(args):
        emit_json({"passed": ok, "tolerance": args.tolerance, "compared": result["compared"],
                   "max_delta": result["max_delta"], "failed": [r["a"] for r in bad],
                   "only_in_a": result["only_in_a"], "only_in_b": result["only_in_b"]})
    else:
        for row in bad:
            print("[FAIL] {}: {}".format(row["a"], "shape {} vs {}".format(
                row["shape_a"], row["shape_b"]) if row["max_delta"] is None else
                "max |delta| {:.3g} > {:g}".format(row["max_delta"], args.tolerance)))
        for name in result["only_in_a"] + result["only_in_b"]:
            print("[FAIL] {}: present on one side only".format(name))
        print("{}: {} tensors compared, max |delta| {:.3g} (tolerance {:g})".format(
            "PASS" if ok else "FAIL", result["compared"], result["max_delta"], args.tolerance))
    return EXIT_OK if ok else EXIT_VALIDATION


def fingerprint(path: str) -> Dict[str, Any]:
    """Per-tensor sha256 of the logical bytes and statistics, and one overall hash."""
    tensors: Dict[str, Any] = {}
    with open_model(path) as model:
        for tensor in logical_tensors(model):
            data = tensor.load()
            s = tensor_stats(tensor.name, tensor_values(tensor), tensor.dtype.name)
            tensors[tensor.name] = {"dtype": tensor.dtype.name, "shape": list(s.shape),
                                    "count": s.count, "sha256": hashlib.sha256(data).hexdigest(),
                                    "mean": s.mean, "std": s.std, "min": s.min, "max": s.max,
                                    "l2": s.l2}
    overall = hashlib.sha256("".join("{}\0{}\n".format(n, t["sha256"])
                                     for n, t in sorted(tensors.items())).encode("utf-8"))
    return {"model": os.path.basename(path), "fingerprint": overall.hexdigest(),
            "tensor_count": len(tensors), "tensors": tensors}


def run_fingerprint(args: argparse.Namespace) -> int:
    result = fingerprint(resolve_model(args.model))
    text = json.dumps(result, indent=1)
    if args.output:
        check_output(args.output, args.force)
        from apr_core.atomic import atomic_output
        with atomic_output(args.output) as handle:
            handle.write(text.encode("utf-8"))
        print("{} {}".format(result["fingerprint"], args.output))
    else:
        sys.stdout.write(text + "\n")
    return EXIT_OK


def run_validate_stats(args: argparse.Namespace) -> int:
    reference = canary_cmd._load_canary(args.reference)
    rows = canary_cmd.compare(reference["tensors"], canary_cmd.snapshot(
        resolve_model(args.model)), args.mean_threshold, args.std_threshold)
    failed = [r for r in rows if not r["passed"]]
    if wants_json(args):
        emit_json({"passed": not failed, "tensors": rows})
    else:
        for row in failed:
            print("[FAIL] {}: {}".format(row["tensor"], "; ".join(row["reasons"])))
        print("{}: {} of {} tensors within tolerance".format(
            "PASS" if not failed else "FAIL", len(rows) - len(failed), len(rows)))
    return EXIT_VALIDATION if failed else EXIT_OK


def run_diff_tensors(args: argparse.Namespace) -> int:
    result = _compare(resolve_model(args.model_a), resolve_model(args.model_b))
    rows = [r for r in result["tensors"] if not args.filter or args.filter in r["a"]
            or args.filter in r["b"]]
    for row in rows:
        if row["status"] == "SHAPE" and row["shape_a"] == row["shape_b"][::-1]:
            row["status"] = "TRANSPOSED"
    if wants_json(args):
        emit_json({"tensors": rows, "only_in_a": result["only_in_a"],
                   "only_in_b": result["only_in_b"]})
        return EXIT_OK
    for row in rows:
        detail = "transposed dimensions detected" if row["status"] == "TRANSPOSED" else \
            "shape {} vs {}".format(row["shape_a"], row["shape_b"]) \
            if row["status"] == "SHAPE" else "max |delta| {:.3g}".format(row["max_delta"])
        print("{:<10} {} <-> {}: {}".format(row["status"], row["a"], row["b"], detail))
    print("{} pairs, {} only in A, {} only in B".format(
        len(rows), len(result["only_in_a"]), len(result["only_in_b"])))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rosetta", help="universal format conversion and verification")
    inner = p.add_subparsers(dest="rosetta_command", metavar="SUBCOMMAND")

    def cmd(name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
        q = inner.add_parser(name, help=help_text)
        q.add_argument("--json", action="store_true")
        q.set_defaults(func=func)
        return q

    q = cmd("inspect", run_inspect, "format and tensors of any model file")
    q.add_argument("model")
    q.add_argument("--hexdump", action="store_true", help="also dump the file's first bytes")
    q.add_argument("--hexdump-bytes", type=int, default=64)
    q = cmd("convert", run_convert, "convert between APR, GGUF and SafeTensors")
    q.add_argument("source")
    q.add_argument("dest")
    q.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")
    q = cmd("chain", run_chain, "a multi-step conversion, e.g. 'st -> apr -> gguf'")
    q.add_argument("chain")
    q.add_argument("--input", required=True)
    q.add_argument("-o", "--output", help="the final output (default: beside the input)")
    q.add_argument("--work-dir", help="where intermediate files go")
    q.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    q = cmd("verify", run_verify, "every tensor of A and B within a tolerance")
    q.add_argument("model_a")
    q.add_argument("model_b")
    q.add_argument("--tolerance", type=float, default=1e-6)
    q = cmd("fingerprint", run_fingerprint, "per-tensor hash and statistics")
    q.add_argument("model")
    q.add_argument("-o", "--output", help="write the fingerprint JSON here (default: stdout)")
    q.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")
    q = cmd("validate-stats", run_validate_stats, "statistics against a fingerprint")
    q.add_argument("model")
    q.add_argument("--reference", required=True, help="a fingerprint or canary JSON")
    q.add_argument("--mean-threshold", type=float, default=canary_cmd.MEAN_DRIFT)
    q.add_argument("--std-threshold", type=float, default=canary_cmd.STD_DRIFT)
    q = cmd("diff-tensors", run_diff_tensors, "tensor pairs across formats and names")
    q.add_argument("model_a")
    q.add_argument("model_b")
    q.add_argument("--filter", help="only tensors whose name contains this")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
