"""`apr inspect` and `apr tensors`: what a file holds.

`inspect` reads the header, metadata and index only (never a tensor payload), so it takes
the same few milliseconds on a 50 GB file (bench/inspect_huge.py). `tensors --stats` and
`--hist` decode tensors: they open the file with full verification first (CRC32 of APR).
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
from typing import Any, Dict, List

from apr_core.codecs import CODEC_MASK, CODEC_NAMES
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.gguf_lazy import GGUFArray
from apr_core.formats.logical import unpack_tensors
from apr_core.formats.open import open_model
from apr_core.tensor import ModelFile

from . import chat_template_arg, model_info
from .common import emit_json, human_bytes, resolve_model
from .render import console, histogram_lines, print_table, progress, wants_json


# Tokens shown by `inspect --vocab` without --full (seed 000 §8 `max_tokens_display`).
MAX_TOKENS_DISPLAY = 20


def summary(model: ModelFile, path: str, full: bool = False) -> Dict[str, Any]:
    """Header, counts by dtype, parameters, vocabulary size, family and metadata."""
    by_dtype: Dict[str, int] = collections.Counter()
    params = 0
    # Header only: a GGUF vocabulary stays undecoded (tests/cli/test_inspect_lazy.py).
    meta = model_info.metadata(model, path, lazy=True)
    # logical tensors: block types a SafeTensors export packed as U8 count as themselves
    for tensor in unpack_tensors(model, meta):
        by_dtype[tensor.dtype.name] += 1
        count = 1
        for dim in tensor.shape:
            count *= dim
        params += count
    out: Dict[str, Any] = model_info.header_fields(model, path)
    out.update(path=path, tensor_count=len(model.tensors), parameters=params,
               dtypes=dict(sorted(by_dtype.items())))
    out["vocab_size"] = model_info.vocab_size(meta)
    found = model_info.family(model, meta)
    out["family"] = found[0].name if found else None
    out["chat_template"] = chat_template_arg.summary(meta)
    out["warnings"] = list(getattr(model, "warnings", []) or [])
    header = model.header_metadata if hasattr(model, "header_metadata") else model.metadata
    out["metadata"] = dict(model.metadata) if full else {k: _short(v) for k, v in header.items()}
    return out


def _short(value: Any) -> Any:
    """Long arrays (vocabularies) are summarised, not dumped."""
    if isinstance(value, (list, GGUFArray)) and len(value) > 8:
        return "[{} items: {} ...]".format(len(value),
                                          ", ".join(repr(value[i]) for i in range(4)))
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + "... ({} chars)".format(len(value))
    return value


def tensor_rows(model: ModelFile, pattern: str = "", codec: bool = False
                ) -> List[Dict[str, Any]]:
    """Index rows (stored offset/size); `codec` adds each payload's compression codec."""
    rows = []
    for name, i in model.tensors.items():
        if _selected(name, pattern):
            row = {"name": i.name, "dtype": i.dtype.name, "shape": list(i.shape),
                   "offset": i.offset, "size": i.size, "nbytes": i.nbytes}
            if codec:
                row["codec"] = CODEC_NAMES.get(i.flags & CODEC_MASK, "unknown")
            rows.append(row)
    return rows


def _selected(name: str, pattern: str) -> bool:
    return not pattern or pattern in name or fnmatch.fnmatch(name, pattern)


def run_inspect(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with open_model(path, verify=False) as model:
        info = summary(model, path, full=args.full)
        tokens = model_info.vocab_tokens(model_info.metadata(model, path)) if args.vocab else None
        if args.full:
            info["tensors"] = tensor_rows(model, codec=True)
        if args.vocab:
            shown = tokens if args.full or tokens is None else tokens[:MAX_TOKENS_DISPLAY]
            info["vocab"] = shown
        if args.header:
            info.pop("metadata")
        if wants_json(args):
            emit_json(info)
            return 0
        _print_summary(info, args)
    return 0


def _print_summary(info: Dict[str, Any], args: argparse.Namespace) -> None:
    out = console()
    out.print("=== {} ===".format(info["path"]))
    lines = [("Format", info["format"]), ("Version", info.get("version")),
             ("Family", info.get("family")),
             ("Template", _template_line(info.get("chat_template"))),
             ("Size", human_bytes(info["file_size"]) if info["file_size"] is not None else None),
             ("Tensors", "{:,}".format(info["tensor_count"])),
             ("Parameters", "{:,}".format(info["parameters"])),
             ("Vocab Size", "{:,}".format(info["vocab_size"]) if info["vocab_size"] else None),
             ("DTypes", ", ".join("{} x{}".format(k, v) for k, v in info["dtypes"].items())),
             ("Flags", " | ".join(info["flags"]) if info.get("flags") else None),
             ("Checksum", "{} (CRC32, not verified: run apr validate)".format(info["checksum"])
              if info.get("checksum") else None)]
    if args.header:
        lines += [(key.replace("_", " ").title(), info[key]) for key in
                  ("header_size", "metadata_offset", "metadata_size", "index_offset",
                   "index_size", "data_offset", "alignment", "kv_count") if key in info]
    for label, value in lines:
        if value is not None:
            out.print("{:12s} {}".format(label + ":", value))
    for warning in info["warnings"]:
        out.print("Warning:     {}".format(warning))
    if "vocab" in info:
        tokens = info["vocab"]
        if tokens is None:
            out.print("Vocabulary:  (none in this file)")
        else:
            out.print("Vocabulary ({} shown):".format(len(tokens)))
            for i, token in enumerate(tokens):
                out.print("  {:>7d}  {!r}".format(i, token))
    if "metadata" in info:
        out.print("Metadata:")
        for key, value in info["metadata"].items():
            out.print("  {:40s} {}".format(key, value))
    if "tensors" in info:
        print_table("Tensors", ["name", "dtype", "shape", "size"],
                    [(t["name"], t["dtype"], "x".join(map(str, t["shape"])) or "scalar",
                      human_bytes(t["nbytes"])) for t in info["tensors"]], right=["size"])


def _template_line(template: Any) -> Any:
    """`Template:` in the summary: none, or its family, the built-in it renders like and
    whether it passes the load-time probe."""
    if not template:
        return None
    if not template["present"]:
        return "none (run/chat complete raw text; --chat-template NAME|FILE adds one)"
    parts = ["{} chars".format(template["chars"]),
             "{} markers".format(template["family"]) if template["family"] else "custom"]
    if template["builtin"]:
        parts.append("renders as built-in '{}'".format(template["builtin"]))
    check = template["check"]
    parts.append("probe ok" if check == "ok" else "BROKEN: {}".format(check))
    return ", ".join(parts)


def run_tensors(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    reads_data = args.stats or args.hist
    with open_model(path, verify=bool(reads_data)) as model:
        if args.hist:
            return _histogram(model, args)
        if args.stats:
            return _stats(model, args)
        rows = tensor_rows(model, args.filter or "")
        if wants_json(args):
            emit_json(rows)
            return 0
        print_table("", ["name", "dtype", "shape", "size"],
                    [(r["name"], r["dtype"], "x".join(map(str, r["shape"])) or "scalar",
                      human_bytes(r["nbytes"])) for r in rows], right=["size"])
    return 0


def _stats(model: ModelFile, args: argparse.Namespace) -> int:
    from apr_core import stats as st       # numpy: imported only when tensors are decoded
    from apr_core.quant import dequantize
    rows = []
    selected = [t for t in st.logical_tensors(model) if _selected(t.name, args.filter or "")]
    for tensor in progress(selected, "statistics"):
        data = tensor.load()
        s = st.tensor_stats(tensor.name, dequantize(data, tensor.dtype, tensor.shape),
                            tensor.dtype.name)
        findings = st.check(s) + st.quant_range(tensor.name, tensor.dtype, data)
        row = s.to_dict()
        row["findings"] = [f.to_dict() for f in findings]
        row["status"] = _status(findings)
        rows.append(row)
    if wants_json(args):
        emit_json(rows)
        return 0
    print_table("", ["name", "dtype", "shape", "mean", "std", "min", "max", "zeros", "nan/inf",
                     "status"],
                [(r["name"], r["dtype"], "x".join(map(str, r["shape"])) or "scalar",
                  r["mean"], r["std"], r["min"], r["max"], r["zeros"], r["nan"] + r["inf"],
                  r["status"] + "".join("  " + f["message"] for f in r["findings"]))
                 for r in rows], right=["mean", "std", "min", "max", "zeros", "nan/inf"])
    return 0


def _status(findings: List[Any]) -> str:
    severities = {f.severity for f in findings}
    return "FAIL" if "error" in severities else "WARN" if severities else "OK"


def _histogram(model: ModelFile, args: argparse.Namespace) -> int:
    from apr_core import stats as st
    tensors = {t.name: t for t in st.logical_tensors(model)}
    if args.hist not in tensors:
        from .explain_cmd import suggestions
        raise AprError(ErrorCode.NOT_FOUND, "no such tensor", tensor=args.hist,
                       did_you_mean=suggestions(args.hist, list(tensors)))
    tensor = tensors[args.hist]
    values = st.tensor_values(tensor)
    s = st.tensor_stats(tensor.name, values, tensor.dtype.name)
    counts, edges = st.histogram(values, args.bins)
    findings = st.check(s)
    if wants_json(args):
        emit_json({"stats": s.to_dict(), "counts": [int(c) for c in counts],
                   "edges": [float(e) for e in edges],
                   "findings": [f.to_dict() for f in findings]})
        return 0
    out = console()
    out.print("Distribution: {} (shape: {}, dtype: {})".format(
        s.name, list(s.shape), s.dtype))
    out.print("Min: {:.4g}  Max: {:.4g}  Mean: {:.4g}  Std: {:.4g}".format(
        s.min, s.max, s.mean, s.std))
    out.print("")
    for line in histogram_lines(counts, edges):
        out.print(line)
    for finding in findings:
        out.print("ANOMALY ({}): {}".format(finding.severity.upper(), finding.message))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model file's header, metadata and tensor summary "
                       "(reads the header and index only)")
    p.add_argument("model", help="model file (.apr, .gguf, .safetensors), HF directory or 'demo'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--header", action="store_true",
                   help="header fields (offsets, sizes, flags) instead of the metadata")
    p.add_argument("--vocab", action="store_true",
                   help="show the vocabulary (first {} tokens; all with --full)".format(
                       MAX_TOKENS_DISPLAY))
    p.add_argument("--full", action="store_true",
                   help="everything: unabridged metadata and the tensor list")
    p.set_defaults(func=run_inspect)
    p = sub.add_parser("tensors", help="list tensors: name, dtype, shape, size; "
                       "--stats / --hist decode them")
    p.add_argument("model")
    p.add_argument("--filter", help="substring or glob on tensor names")
    p.add_argument("--stats", action="store_true",
                   help="mean, std, min, max, zeros, NaN/Inf and the expected-range check "
                        "(seed 000 §10.9) per tensor")
    p.add_argument("--hist", metavar="NAME", help="terminal histogram of one tensor")
    p.add_argument("--bins", type=int, default=40, help="histogram bins (default 40)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_tensors)
