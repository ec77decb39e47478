"""`apr pull REF`: fetch a model by reference into the cache, verified, without running it.

    apr pull hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_K_M
    apr pull https://example.com/model.gguf --sha256 HEX
    apr pull chat                 # a model named in apr.toml, at its apr.lock revision

Hugging Face files land in the shared Hugging Face cache (HF_HOME / HF_HUB_CACHE), plain
URLs in $APR_CACHE/blobs; `apr list`, `apr rm REF` and `apr cache` manage them.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from apr_core.errors import AprError, ErrorCode
from apr_core.refs import is_reference

from ..config import wants_json
from .commands import help_line
from .common import emit_json, human_bytes


def run_pull(args: argparse.Namespace) -> int:
    from ..references import fetch, progress_bar
    text = args.reference
    revision, expected = args.revision or "", None
    if not is_reference(text):
        from ..project import find_project, load, read_lock
        project = find_project()
        models = load(project)["models"] if project else {}
        if text not in models:
            raise AprError(ErrorCode.ARGUMENT, "give a reference (hf://ORG/REPO[/PATH]"
                           "[@REV], hf://ORG/REPO:QUANT, https://...) or a model named in "
                           "apr.toml", reference=text)
        locked = read_lock(project).get(text)
        text = models[text]
        if locked and locked.get("source") == text and not revision:
            revision = locked.get("revision", "")
            expected = {f["path"]: f["sha256"] for f in locked.get("files") or []
                        if f.get("sha256")}
    if args.sha256:
        expected = {"": args.sha256.lower()}
        if not text.lower().startswith(("http://", "https://")):
            raise AprError(ErrorCode.ARGUMENT, "--sha256 is for URLs; hf:// files are "
                           "verified against the Hub's sha256", reference=text)
    with progress_bar(False if wants_json(args) else None) as progress:
        record = fetch(text, revision=revision, expected=expected, progress=progress)
    result: Dict[str, Any] = {
        "reference": record["reference"], "revision": record["revision"],
        "path": record["path"], "bytes": sum(int(f["size"]) for f in record["files"]),
        "files": [{k: f[k] for k in ("path", "size", "sha256", "local")}
                  for f in record["files"]], "verified": True}
    if wants_json(args):
        emit_json(result)
    else:
        print("pulled {} @ {} ({}, {} file{}, sha256 verified)".format(
            result["reference"], result["revision"][:12], human_bytes(result["bytes"]),
            len(result["files"]), "" if len(result["files"]) == 1 else "s"))
        print(result["path"])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pull", help=help_line("pull"), description=__doc__.split("\n\n")[0])
    p.add_argument("reference", metavar="REF",
                   help="hf://ORG/REPO[/PATH][@REV], hf://ORG/REPO:QUANT, https://URL, or "
                        "a model named in apr.toml")
    p.add_argument("--revision", help="branch, tag or commit (same as REF@REV)")
    p.add_argument("--sha256", help="for a URL: refuse the file unless it has this sha256")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_pull)
