"""`apr convert`: format conversion (re-encoding with --quantize / --precision, see
quantize_cmd), magnitude pruning (`--prune FRACTION`, `--prune-threshold T`), SVD low-rank
factorization (`--lowrank svd --rank R`, undone by `--expand-lowrank`) and source analysis
(`--analyze-source`: seed 000 §4.8.6 statistics, no output written) and a canary gate
(`--canary C.json`, §4.14.4: an output that fails it is removed). Every conversion runs
the inline validation of §10.10 (NaN/Inf, norm means) and aborts on a failure unless
`--force`/`--relaxed`. Integrity checks are `apr validate` (validate_cmd)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import convert
from apr_core.conversion.quality import QualityReport

from ..config import wants_json
from .common import check_output, emit_json, parse_size, resolve_model
from .quantize_cmd import add_retype_arguments, progress_bar, run_conversion


def transformed(args: argparse.Namespace, path: str) -> Optional[Any]:
    """A lazy view applying --prune/--prune-threshold, --lowrank or --expand-lowrank, or
    None when none is asked for."""
    if args.prune is None and args.prune_threshold is None and not args.lowrank \
            and not args.expand_lowrank:
        return None
    from apr_core.formats.open import open_model
    from apr_core.transforms import lowrank, prune
    model: Any = open_model(path)
    if args.expand_lowrank:
        model = lowrank.expand_model(model)
    if args.prune is not None or args.prune_threshold is not None:
        model = prune.prune_model(model, args.prune, args.prune_threshold, args.target)
    if args.lowrank:
        if args.rank is None:
            raise AprError(ErrorCode.ARGUMENT, "--lowrank svd needs --rank R")
        model = lowrank.lowrank_model(model, args.rank, args.target)
    return model


def run_convert(args: argparse.Namespace) -> int:
    from apr_core.conversion.retype import PRECISIONS
    if args.quantize and args.quantize.lower() in PRECISIONS and not args.precision:
        # `--quantize fp16` (seed 000 §4.8.1) is a precision, not a quantization
        args.precision, args.quantize = args.quantize.lower(), None
    if args.analyze_source:
        from .analyze import run_analyze
        return run_analyze(args)
    if args.canary and args.shard_size:
        raise AprError(ErrorCode.ARGUMENT, "--canary checks a single output file: drop "
                       "--shard-size or run `apr canary check` on the manifest")
    code = _run(args)
    return canary_gate(args) if code == 0 and args.canary else code


def canary_gate(args: argparse.Namespace) -> int:
    """Seed 000 §4.14.4: the output must pass the canary, else it is removed (exit 5);
    `--force` keeps it with a warning."""
    from .canary_cmd import _load_canary, compare, snapshot
    rows = compare(_load_canary(args.canary)["tensors"], snapshot(args.output))
    failed = [r for r in rows if not r["passed"]]
    if not failed:
        return 0
    summary = "; ".join("{}: {}".format(r["tensor"], ", ".join(r["reasons"]))
                        for r in failed[:3])
    if args.force:
        print("warning: canary check failed, output kept (--force): " + summary,
              file=sys.stderr)
        return 0
    os.unlink(args.output)
    raise AprError(ErrorCode.VALIDATION, "canary check failed; output removed (use --force "
                   "to keep it)", failed=len(failed), first=summary)


def _run(args: argparse.Namespace) -> int:
    if args.output is None:
        raise AprError(ErrorCode.ARGUMENT, "convert needs -o/--output")
    path = resolve_model(args.model)
    check_output(args.output, args.force)
    view = transformed(args, path)
    if (args.quantize or args.precision) and view is None:
        return run_conversion(args, args.quantize)
    start = time.perf_counter()
    report = QualityReport()
    with progress_bar("converting") as progress:
        # A progress callback (even a silent one) makes convert() check every tensor
        # inline as it is written (§10.10).
        fmt = convert(view if view is not None else path, args.output, args.format,
                      compression=args.compress, alignment=args.alignment,
                      max_shard_size=parse_size(args.shard_size) if args.shard_size else None,
                      dequantize=args.dequantize, overwrite=True, quantize=args.quantize,
                      precision=args.precision, force=args.force or args.relaxed,
                      keep_embeddings_q8=args.keep_embeddings_q8, report=report,
                      progress=progress or (lambda name, done, total: None))
    result = {"input": path, "output": args.output, "format": fmt,
              "bytes": os.path.getsize(args.output) if os.path.isfile(args.output) else None,
              "seconds": round(time.perf_counter() - start, 3),
              "warnings": report.warnings}
    if wants_json(args):
        emit_json(result)
    else:
        for warning in report.warnings:
            print("warning: {}".format(warning), file=sys.stderr)
        print("wrote {} ({}) in {:.2f}s".format(args.output, fmt, result["seconds"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert between APR, GGUF and SafeTensors")
    p.add_argument("model")
    p.add_argument("-o", "--output",
                   help="output path; the extension picks the format")
    p.add_argument("--format", choices=["apr", "gguf", "safetensors"])
    p.add_argument("--prune", type=float, metavar="FRACTION",
                   help="zero this fraction of each weight matrix, smallest magnitudes first")
    p.add_argument("--prune-threshold", type=float, metavar="T",
                   help="zero every weight-matrix value with |v| < T")
    p.add_argument("--lowrank", choices=["svd"],
                   help="store weight matrices as two SVD factors (with --rank)")
    p.add_argument("--rank", type=int, help="rank for --lowrank")
    p.add_argument("--target", metavar="GLOB",
                   help="prune/factorize only tensors whose name matches, e.g. '*.fc1.weight'")
    p.add_argument("--expand-lowrank", action="store_true",
                   help="rebuild factorized matrices (a @ b) as F32")
    p.add_argument("--canary", metavar="CANARY.json",
                   help="fail (and remove the output) unless it passes this canary")
    p.add_argument("--analyze-source", action="store_true",
                   help="print the source's tensor statistics against the expected ranges "
                        "(seed 000 §10.9) and write nothing; exit 5 on a failure")
    p.add_argument("--compress", help="APR payload compression: lz4, zstd or zstd:LEVEL")
    p.add_argument("--alignment", type=int, default=64, choices=[32, 64])
    p.add_argument("--shard-size", help="write a sharded APR model, e.g. 512M")
    p.add_argument("--dequantize", action="store_true",
                   help="SafeTensors output: dequantize block types to F32 instead of packing")
    p.add_argument("--quantize", metavar="TYPE|FILETYPE",
                   help="a plain type in lower case (q4_k, q8_0) or a llama.cpp file type "
                        "(Q4_K_M, Q8_0: its recipe)")
    add_retype_arguments(p)
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing output (and, when re-encoding, ignore "
                        "validation failures)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_convert)
