"""`apr quantize` and the quantizing side of `apr convert`: progress bar, quality table.

    apr quantize MODEL TYPE -o OUT [--precision f16] [--keep-embeddings-q8] [--force] [--json]
    apr convert MODEL --quantize TYPE|FILETYPE [--precision ...] -o OUT ...

TYPE is a plain type (`q4_k`: every 2-D weight whose rows fit) or a llama.cpp file type
(`Q4_K_M`). `--force` overwrites the output and lets tensors that fail inline validation
through (recorded as warnings); `--relaxed` does only the latter.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any, Callable, Dict, Iterator, Optional

from apr_core.conversion.convert import convert
from apr_core.conversion.quality import QualityReport

from .common import emit_json, human_bytes, parse_size, quiet, resolve_model


@contextlib.contextmanager
def progress_bar(label: str) -> Iterator[Optional[Callable[[str, int, int], None]]]:
    """A `progress(name, done, total)` callback drawing a rich bar on stderr, or None
    when quiet (not a terminal, or APR_QUIET=1)."""
    if quiet():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[tensor]}"), console=Console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task(label, total=None, tensor="")

        def update(name: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, tensor=name)
        yield update


def run_conversion(args: argparse.Namespace, quantize: Optional[str]) -> int:
    """Convert with re-encoding; prints a summary (or the JSON report)."""
    path = resolve_model(args.model)
    report = QualityReport()
    start = time.perf_counter()
    with progress_bar("converting") as progress:
        fmt = convert(path, args.output, getattr(args, "format", None),
                      compression=getattr(args, "compress", None),
                      alignment=getattr(args, "alignment", 64),
                      max_shard_size=parse_size(args.shard_size)
                      if getattr(args, "shard_size", None) else None,
                      dequantize=getattr(args, "dequantize", False), overwrite=args.force,
                      quantize=quantize, precision=args.precision,
                      force=args.force or args.relaxed,
                      keep_embeddings_q8=args.keep_embeddings_q8, report=report,
                      progress=progress)
    result: Dict[str, Any] = {"input": path, "output": args.output, "format": fmt,
                              "quantize": quantize, "precision": args.precision,
                              "seconds": round(time.perf_counter() - start, 3),
                              "quality": report.to_dict()}
    if args.json:
        emit_json(result)
    else:
        print_summary(report)
        print("wrote {} ({}) in {:.2f}s".format(args.output, fmt, result["seconds"]))
    return 0


def print_summary(report: QualityReport, limit: int = 12) -> None:
    """A table of the worst tensors (lowest cosine) and the totals."""
    totals = report.totals()
    for warning in report.warnings:
        print("warning: {}".format(warning), file=sys.stderr)
    if not report.tensors:
        print("no tensors were re-encoded")
        return
    rows = sorted(report.tensors, key=lambda r: r.cosine)[:limit]
    header = ("tensor", "from", "to", "bpw", "rmse", "max err", "cosine")
    lines = [(r.name, r.source_dtype, r.dtype, "{:.2f}".format(r.bits_per_weight),
              "{:.3g}".format(r.rmse), "{:.3g}".format(r.max_abs_error),
              "{:.6f}".format(r.cosine)) for r in rows]
    if quiet():
        widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
        for line in [header] + lines:
            print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    else:
        from rich.console import Console
        from rich.table import Table
        table = Table(title="quality (worst {} of {} tensors)".format(len(rows),
                                                                      len(report.tensors)))
        for name in header:
            table.add_column(name, justify="left" if name == "tensor" else "right")
        for line in lines:
            table.add_row(*line)
        Console().print(table)
    print("{} tensors re-encoded: {} -> {} ({:.2f} bits/weight), min cosine {:.6f}".format(
        totals["tensors"], human_bytes(totals["bytes_before"]),
        human_bytes(totals["bytes_after"]), totals["bits_per_weight"], totals["min_cosine"]))


def add_retype_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `apr convert` and `apr quantize`."""
    p.add_argument("--precision", choices=["f32", "f16", "bf16"],
                   help="float matrices that are not quantized are written in this precision")
    p.add_argument("--keep-embeddings-q8", action="store_true",
                   help="keep the token embedding in Q8_0")
    p.add_argument("--relaxed", action="store_true",
                   help="let tensors that fail inline validation through (as warnings)")


def run_quantize(args: argparse.Namespace) -> int:
    return run_conversion(args, args.type)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="quantize a model (plain type or llama.cpp file type)")
    p.add_argument("model")
    p.add_argument("type", help="a plain type in lower case (q4_k, q8_0: every 2-D weight whose "
                   "rows fit) or a llama.cpp file type (Q4_K_M, Q8_0: its recipe)")
    p.add_argument("-o", "--output", required=True,
                   help="output path; the extension picks the format")
    p.add_argument("--compress", help="APR payload compression: lz4, zstd or zstd:LEVEL")
    add_retype_arguments(p)
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing output and ignore validation failures")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_quantize)
