"""`apr tree`: the model's architecture as a tree of its tensor names (header only).

Names split on "." into a tree; numbered children (layers `blk.0` ... `blk.29`) fold into
one `{i} x30` node holding the union of their children, so a 30-layer model prints one
layer. `--format mermaid` prints a `graph TD` diagram (GitHub/Markdown render it);
`--json` the nested tree.
"""
from __future__ import annotations

import argparse
import re
from typing import Any, Dict, List, Optional

from rich.tree import Tree

from apr_core.formats.open import open_model

from .common import emit_json, resolve_model
from .render import console, wants_json


def build(tensors: Dict[str, Any]) -> Dict[str, Any]:
    """{"name", "children": [...], "tensor": {dtype, shape} | None, "count": repeats}."""
    root: Dict[str, Any] = {"name": "", "children": {}, "tensor": None}
    for name, info in tensors.items():
        node = root
        for part in name.split("."):
            node = node["children"].setdefault(part, {"name": part, "children": {},
                                                      "tensor": None})
        node["tensor"] = {"dtype": info.dtype.name, "shape": list(info.shape)}
    return _fold(root)


def _fold(node: Dict[str, Any]) -> Dict[str, Any]:
    children = node["children"]
    numbered = sorted((k for k in children if k.isdigit()), key=int)
    out: Dict[str, Any] = {"name": node["name"], "tensor": node["tensor"], "count": 1,
                           "children": []}
    if len(numbered) >= 2:
        merged: Dict[str, Any] = {"name": "{i}", "children": {}, "tensor": None}
        for key in numbered:
            _merge(merged, children[key])
        folded = _fold(merged)
        folded["count"] = len(numbered)
        folded["range"] = [int(numbered[0]), int(numbered[-1])]
        out["children"].append(folded)
        children = {k: v for k, v in children.items() if k not in numbered}
    out["children"].extend(_fold(child) for child in children.values())
    return out


def _merge(into: Dict[str, Any], node: Dict[str, Any]) -> None:
    if into["tensor"] is None:
        into["tensor"] = node["tensor"]
    for key, child in node["children"].items():
        _merge(into["children"].setdefault(key, {"name": key, "children": {},
                                                 "tensor": None}), child)


def _label(node: Dict[str, Any]) -> str:
    text = node["name"] or "model"
    if node["count"] > 1:
        text += " x{} [{}..{}]".format(node["count"], *node["range"])
    if node["tensor"] is not None:
        text += "  {} {}".format(node["tensor"]["dtype"], node["tensor"]["shape"])
    return text


def to_rich(node: Dict[str, Any], tree: Optional[Tree] = None) -> Tree:
    branch = Tree(_label(node)) if tree is None else tree.add(_label(node))
    for child in node["children"]:
        to_rich(child, branch)
    return branch


def to_mermaid(root: Dict[str, Any]) -> List[str]:
    """`graph TD` lines: one node per tree node, edges parent --> child."""
    lines = ["graph TD"]
    counter = [0]

    def visit(node: Dict[str, Any], parent: Optional[str]) -> None:
        ident = "n{}".format(counter[0])
        counter[0] += 1
        label = re.sub(r'["\[\]]', "", _label(node)).replace("  ", " ")
        lines.append('    {}["{}"]'.format(ident, label))
        if parent is not None:
            lines.append("    {} --> {}".format(parent, ident))
        for child in node["children"]:
            visit(child, ident)
    visit(root, None)
    return lines


def run_tree(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    with open_model(path, verify=False) as model:
        root = build(model.tensors)
    root["name"] = model.format
    if wants_json(args):
        emit_json(root)
    elif args.format == "mermaid":
        print("\n".join(to_mermaid(root)))
    else:
        console().print(to_rich(root))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tree", help="architecture tree from the tensor names")
    p.add_argument("model")
    p.add_argument("--format", choices=["text", "mermaid"], default="text")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_tree)
