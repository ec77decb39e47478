"""`apr list` / `apr rm` / `apr cache info|clear`: the model cache (`$APR_CACHE/models`,
seed 004 §2.5) and the models apr fetched by reference (`apr pull`, `hf://`, URLs).

`apr import SOURCE` without `-o` writes there; `apr list` shows what is cached and `apr rm
NAME` removes one entry (a bare file name inside the cache: never a path outside it);
`apr rm REF` removes a pulled reference's files (from the shared Hugging Face cache: a blob
only when no other snapshot links to it). `apr cache info` shows the directories and their
sizes, `apr cache clear` removes every pulled reference, URL blob and partial download
(`--models` also the imported models).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Dict, List

from apr_core.atomic import sweep_stale
from apr_core.errors import AprError, ErrorCode

from ..config import models_dir, wants_json
from .common import emit_json, human_bytes

COMMANDS = {
    "list": "list cached models ($APR_CACHE)",
    "ls": None,
    "rm": "remove a cached model",
    "remove": None,
    "cache": "the cache: info (directories, sizes), clear (pulled models, downloads)",
}


def entries() -> List[Dict[str, Any]]:
    root = models_dir()
    if not root.is_dir():
        return []
    sweep_stale(root)       # temporary files of imports that were killed mid-write
    out = []
    for path in sorted(root.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            out.append({"name": path.name, "path": str(path), "bytes": stat.st_size,
                        "modified": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                  time.gmtime(stat.st_mtime))})
    return out


def run_list(args: argparse.Namespace) -> int:
    from .. import hub_store
    rows = entries()
    pulled = hub_store.entries()
    if wants_json(args):
        emit_json({"cache": str(models_dir()), "models": rows, "pulled": pulled,
                   "hf_cache": str(hub_store.hf_cache_dir())})
        return 0
    for row in pulled:
        print("{:<40} {:>12}  {}{}".format(row["name"], human_bytes(row["bytes"]),
                                           (row["revision"] or "")[:12],
                                           "" if row["present"] else "  (files missing)"))
    if not rows and not pulled:
        print("no cached models in {}".format(models_dir()))
    for row in rows:
        print("{:<40} {:>12}  {}".format(row["name"], human_bytes(row["bytes"]),
                                         row["modified"]))
    return 0


def run_rm(args: argparse.Namespace) -> int:
    name = args.name
    from .. import hub_store
    if name in hub_store.records():
        result = hub_store.forget(name)
        if wants_json(args):
            emit_json(result)
        else:
            print("removed {} ({})".format(name, human_bytes(result["bytes"])))
        return 0
    if not name or os.sep in name or (os.altsep and os.altsep in name) or \
            name in (".", "..") or name.startswith("."):
        raise AprError(ErrorCode.ARGUMENT, "give a cached model's name (see apr list), "
                       "not a path", name=name)
    root = models_dir()
    candidates = [root / name, root / (name + ".apr")]
    target = next((c for c in candidates if c.is_file()), None)
    if target is None:
        raise AprError(ErrorCode.IO, "no such cached model", name=name, cache=str(root))
    target.unlink()
    if wants_json(args):
        emit_json({"removed": str(target)})
    else:
        print("removed {}".format(target))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", aliases=["ls"], help="list cached models ($APR_CACHE)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_list)
    p = sub.add_parser("rm", aliases=["remove"], help="remove a cached model")
    p.add_argument("name", help="a cached model's name, or a pulled reference (apr list)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_rm)
    p = sub.add_parser("cache", help=COMMANDS["cache"])
    p.add_argument("action", choices=["info", "clear"])
    p.add_argument("--models", action="store_true",
                   help="clear: also the imported models in $APR_CACHE/models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_cache)


def run_cache(args: argparse.Namespace) -> int:
    from .. import hub_store
    if args.action == "info":
        result = hub_store.usage()
        if wants_json(args):
            emit_json(result)
            return 0
        print("apr cache:  {}".format(result["apr_cache"]))
        print("HF cache:   {}{}".format(result["hf_cache"],
                                        "  (offline)" if result["offline"] else ""))
        for key in ("models", "url_blobs", "partial_downloads"):
            print("  {:<18} {:>5} files {:>12}".format(key, result[key]["files"],
                                                        human_bytes(result[key]["bytes"])))
        print("  {:<18} {:>5} refs  {:>12}".format("pulled", result["pulled"]["references"],
                                                    human_bytes(result["pulled"]["bytes"])))
        return 0
    result = hub_store.clear(include_models=args.models)
    if wants_json(args):
        emit_json(result)
    else:
        print("removed {} reference(s), {} freed".format(len(result["removed"]),
                                                        human_bytes(result["bytes"])))
    return 0
