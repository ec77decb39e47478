"""`apr lint`: best practices and conventions, not corruption (seed 000 §4.11).

Falsifiable guarantees, each a rule below:
- Naming: a tensor name no name map knows (seed 000 §10.8, `apr_core.name_maps`) -> INFO.
- Metadata: missing `license`, `model_card` or `provenance` -> WARN each.
- Efficiency: tensor payloads not on 64-byte boundaries -> INFO.
- Compression: uncompressed tensors over 1 MiB -> INFO.
- Structure: what the reader noticed (misalignment, non-zero padding, unknown flags) -> WARN.
Exit 0 (lint reports); `--strict` exits 5 when there is any WARN.
"""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional

from apr_core.codecs import CODEC_MASK
from apr_core.formats.open import open_model
from apr_core.tensor import ModelFile

from . import model_info
from .common import EXIT_OK, EXIT_VALIDATION, emit_json, resolve_model
from .render import console, wants_json


ALIGNMENT = 64
BIG_TENSOR = 1 << 20
SHOW_NAMES = 5


def _issue(level: str, category: str, message: str) -> Dict[str, str]:
    return {"level": level, "category": category, "message": message}


def naming_issues(names: List[str]) -> List[Dict[str, str]]:
    from apr_core import name_maps
    if name_maps.detect(names) is not None:
        return []
    maps = [name_maps.name_map(arch) for arch in name_maps.architectures()]
    unknown = [n for n in names if not any(m.known(n, s) for m in maps for s in m.schemes())]
    out = []
    for name in unknown[:SHOW_NAMES]:
        hint = ""
        if name.endswith(".w") or name.endswith(".b"):
            hint = " (should be '{}' for auto-mapping)".format(
                name[:-2] + (".weight" if name.endswith(".w") else ".bias"))
        out.append(_issue("INFO", "Tensor Naming", "'{}' is not a canonical tensor name{}"
                          .format(name, hint)))
    if len(unknown) > SHOW_NAMES:
        out.append(_issue("INFO", "Tensor Naming", "{} more tensor names are not canonical"
                          .format(len(unknown) - SHOW_NAMES)))
    return out


def lint(model: ModelFile, source: Optional[str] = None) -> List[Dict[str, str]]:
    """Every rule's issues for one opened model (`source`: its path, for HF side files)."""
    issues: List[Dict[str, str]] = []
    for warning in getattr(model, "warnings", []) or []:
        issues.append(_issue("WARN", "Structure", warning))
    meta = model_info.metadata(model, source)
    for key in ("license", "model_card", "provenance"):
        if model_info.meta_value(meta, key) is None:
            issues.append(_issue("WARN", "Metadata", "Missing '{}' field".format(key)))
    issues += naming_issues(list(model.tensors))
    infos = list(model.tensors.values())
    loose = [t for t in infos if t.offset % ALIGNMENT]
    if loose:
        worst = min((t.offset & -t.offset) for t in loose) if any(t.offset for t in loose) \
            else 0
        issues.append(_issue("INFO", "Efficiency", "{} tensors could be aligned to {} bytes "
                             "(currently {})".format(len(loose), ALIGNMENT, worst)))
    raw = [t for t in infos if not t.flags & CODEC_MASK and t.nbytes > BIG_TENSOR]
    if raw:
        issues.append(_issue("INFO", "Compression", "{} uncompressed tensors over 1 MiB "
                             "(first: {})".format(len(raw), raw[0].name)))
    return issues


def run_lint(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    # verify=True: the padding check (non-zero padding is a warning) rides on the CRC pass.
    with open_model(path, verify=True) as model:
        issues = lint(model, path)
    code = EXIT_VALIDATION if args.strict and any(i["level"] == "WARN" for i in issues) \
        else EXIT_OK
    if wants_json(args):
        emit_json({"path": path, "issues": issues})
        return code
    out = console()
    for issue in issues:
        out.print("[{}] {}: {}".format(issue["level"], issue["category"], issue["message"]))
    if not issues:
        out.print("No issues found.")
    return code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lint", help="check naming, metadata, alignment and compression "
                       "conventions")
    p.add_argument("model")
    p.add_argument("--strict", action="store_true", help="exit 5 when there is any WARN")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_lint)
