"""`apr inspect` and `apr tensors`: what a file holds, read from its header and index only."""
from __future__ import annotations

import argparse
import collections
import fnmatch
import os
from typing import Any, Dict

from apr_core.formats.open import open_model
from apr_core.tensor import ModelFile

from .common import emit_json, human_bytes, resolve_model


def summary(model: ModelFile, path: str) -> Dict[str, Any]:
    by_dtype: Dict[str, int] = collections.Counter()
    params = 0
    for info in model.tensors.values():
        by_dtype[info.dtype.name] += 1
        params += info.n_elements
    meta = model.metadata
    out: Dict[str, Any] = {
        "path": path,
        "format": model.format,
        "file_size": os.path.getsize(path) if os.path.isfile(path) else None,
        "tensor_count": len(model.tensors),
        "parameters": params,
        "dtypes": dict(sorted(by_dtype.items())),
    }
    for key in ("version", "alignment", "flags", "warnings"):
        if hasattr(model, key):
            out[key] = getattr(model, key)
    out["metadata"] = {k: _short(v) for k, v in meta.items()}
    return out


def _short(value: Any) -> Any:
    """Long arrays (vocabularies) are summarised, not dumped."""
    if isinstance(value, list) and len(value) > 8:
        return "[{} items: {} ...]".format(len(value), ", ".join(repr(v) for v in value[:4]))
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + "... ({} chars)".format(len(value))
    return value


def run_inspect(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with open_model(path, verify=False) as model:
        info = summary(model, path)
        if args.json:
            emit_json(info)
            return 0
        print("{}  [{}]".format(path, info["format"]))
        if info["file_size"] is not None:
            print("  size        {}".format(human_bytes(info["file_size"])))
        print("  tensors     {}".format(info["tensor_count"]))
        print("  parameters  {:,}".format(info["parameters"]))
        print("  dtypes      {}".format(", ".join("{} x{}".format(k, v)
                                                  for k, v in info["dtypes"].items())))
        for warning in info.get("warnings") or []:
            print("  warning     {}".format(warning))
        if not args.header:
            print("  metadata")
            for key, value in info["metadata"].items():
                print("    {:40s} {}".format(key, value))
    return 0


def run_tensors(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with open_model(path, verify=False) as model:
        rows = [info for name, info in model.tensors.items()
                if not args.filter or fnmatch.fnmatch(name, args.filter) or args.filter in name]
        if args.json:
            emit_json([{"name": i.name, "dtype": i.dtype.name, "shape": list(i.shape),
                        "offset": i.offset, "size": i.size, "nbytes": i.nbytes} for i in rows])
            return 0
        for i in rows:
            print("{:50s} {:8s} {:20s} {}".format(i.name, i.dtype.name,
                                                 "x".join(map(str, i.shape)) or "scalar",
                                                 human_bytes(i.nbytes)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model file's header, metadata and tensor summary")
    p.add_argument("model", help="model file (.apr, .gguf, .safetensors), HF directory or 'demo'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--header", action="store_true", help="header summary only, no metadata")
    p.set_defaults(func=run_inspect)
    p = sub.add_parser("tensors", help="list tensors: name, dtype, shape, size")
    p.add_argument("model")
    p.add_argument("--filter", help="substring or glob on tensor names")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_tensors)
