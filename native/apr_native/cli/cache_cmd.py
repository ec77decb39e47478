"""`apr list` / `apr rm` / `apr cache info|clear`: the built-in models (`demo`, ...), the
model cache (`$APR_CACHE/models`, seed 004 §2.5) and the models apr fetched by reference
(`apr pull`, `hf://`, URLs).

`apr import SOURCE` without `-o` writes there; `apr list` shows the built-in models (where
their files are, whether their packages are installed) and what is cached, and `apr rm
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
from .commands import help_line
from .common import emit_json, human_bytes


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
    from .. import hub_store, real_models
    builtin = real_models.describe()
    rows = entries()
    pulled = hub_store.entries()
    joined = {os.path.basename(m["path"]): m["name"] for m in builtin if m["path"]}
    for row in rows:        # a built-in model joined from its packages is cached here too
        row["builtin"] = joined.get(row["name"])
    if wants_json(args):
        emit_json({"builtin": builtin, "cache": str(models_dir()), "models": rows,
                   "pulled": pulled, "hf_cache": str(hub_store.hf_cache_dir())})
        return 0
    print("built-in models:")
    for model in builtin:
        label = model["name"] + "".join(" ({})".format(a) for a in model["aliases"])
        size = human_bytes(model["bytes"]) if model["bytes"] is not None else "?"
        if not model["present"]:
            where = "not installed: " + model["install"]
        elif not os.path.exists(model["path"]):
            where = model["path"] + "  (joined from its packages on first use)"
        else:
            where = model["path"]
        print("  {:<30} {:>12}  {}".format(label, size, where))
    print("pulled references:" if pulled else "pulled references: none")
    for row in pulled:
        print("  {:<40} {:>12}  {}{}".format(row["name"], human_bytes(row["bytes"]),
                                             (row["revision"] or "")[:12],
                                             "" if row["present"] else "  (files missing)"))
    print("cached models in {}:{}".format(models_dir(), "" if rows else " none"))
    for row in rows:
        print("  {:<40} {:>12}  {}{}".format(
            row["name"], human_bytes(row["bytes"]), row["modified"],
            "  (built-in {})".format(row["builtin"]) if row["builtin"] else ""))
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
    p = sub.add_parser("list", aliases=["ls"], help=help_line("list"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_list)
    p = sub.add_parser("rm", aliases=["remove"], help=help_line("rm"))
    p.add_argument("name", help="a cached model's name, or a pulled reference (apr list)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_rm)
    p = sub.add_parser("cache", help=help_line("cache"))
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
