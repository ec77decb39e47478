"""`apr list` / `apr rm`: the model cache (`$APR_CACHE/models`, seed 004 §2.5).

`apr import SOURCE` without `-o` writes there; `apr list` shows what is cached and `apr rm
NAME` removes one entry (a bare file name inside the cache: never a path outside it).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Dict, List

from apr_core.errors import AprError, ErrorCode

from ..config import models_dir, wants_json
from .common import emit_json, human_bytes

COMMANDS = {
    "list": "list cached models ($APR_CACHE)",
    "ls": None,
    "rm": "remove a cached model",
    "remove": None,
}


def entries() -> List[Dict[str, Any]]:
    root = models_dir()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            out.append({"name": path.name, "path": str(path), "bytes": stat.st_size,
                        "modified": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                  time.gmtime(stat.st_mtime))})
    return out


def run_list(args: argparse.Namespace) -> int:
    rows = entries()
    if wants_json(args):
        emit_json({"cache": str(models_dir()), "models": rows})
        return 0
    if not rows:
        print("no cached models in {}".format(models_dir()))
    for row in rows:
        print("{:<40} {:>12}  {}".format(row["name"], human_bytes(row["bytes"]),
                                         row["modified"]))
    return 0


def run_rm(args: argparse.Namespace) -> int:
    name = args.name
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
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_rm)
