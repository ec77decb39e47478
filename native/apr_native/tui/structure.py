"""The data-flow graph of a model for the graph view, from its tensor names alone:

    input ids → embedding → blocks (norm → attention → + residual → norm → FFN →
    + residual, per layer) → output norm → lm head → logits

Each tensor's role comes from THE name maps (`apr_core.name_maps`: the family is detected
from the names, which are translated to the canonical APR names whose templates are the
contract roles of `DECODER_APR`); this module adds only the data-flow stage of each role.
Files no name map knows fall back to grouping by layer number. Pure Python, no Textual.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Pattern, Tuple

from apr_core.errors import AprError
from apr_core.name_maps import DECODER_APR, detect, name_map

# Data-flow stage of each contract role (the keys of name_maps.DECODER_APR), listed in
# the order a stage's tensors are shown (q, k, v before o; a weight before its bias).
ROLE_STAGE = {
    "embedding": "embedding", "position_embedding": "embedding", "rope_freqs": "rope",
    "attn_norm": "attn_norm", "attn_norm_bias": "attn_norm",
    "q": "attention", "q_bias": "attention", "k": "attention", "k_bias": "attention",
    "v": "attention", "v_bias": "attention", "qkv": "attention", "qkv_bias": "attention",
    "q_norm": "attention", "k_norm": "attention", "o": "attention", "o_bias": "attention",
    "post_attn_norm": "attention",
    "ffn_norm": "ffn_norm", "ffn_norm_bias": "ffn_norm",
    "gate": "ffn", "up": "ffn", "up_bias": "ffn", "down": "ffn", "down_bias": "ffn",
    "post_ffn_norm": "ffn",
    "output_norm": "output_norm", "output_norm_bias": "output_norm", "lm_head": "lm_head",
}
_ROLE_ORDER = {role: i for i, role in enumerate(ROLE_STAGE)}

# The stages of one block in data-flow order: (stage, title, what happens to x / h).
BLOCK_STAGES = (
    ("attn_norm", "attention norm", "x → h = norm(x)"),
    ("attention", "self-attention", "h → q, k, v → softmax(q·kᵀ/√d)·v → o"),
    ("attn_residual", "+ residual", "x = x + o"),
    ("ffn_norm", "FFN norm", "x → h = norm(x)"),
    ("ffn", "feed-forward", ""),          # the formula depends on a gate (see _ffn_flow)
    ("ffn_residual", "+ residual", "x = x + ffn(h)"),
    ("other", "other tensors", ""),
)
_BLOCK_STAGE_NAMES = {stage for stage, _, _ in BLOCK_STAGES}
_RESIDUAL_AFTER = {"attn_residual": "attention", "ffn_residual": "ffn"}
# A layer number in a name no name map knows (GGUF, HF, GPT-2, BERT spellings).
_LAYER = re.compile(r"^(.*?(?:blk|layers|layer|h)\.(\d+))\.")


@dataclass
class Node:
    """One line of the graph: a label, the tensor it stands for (leaves), children."""

    label: str
    tensor: Optional[str] = None
    children: List["Node"] = field(default_factory=list)
    expanded: bool = False

    def tensors(self) -> List[str]:
        """Every tensor name under this node, in display order."""
        own = [self.tensor] if self.tensor else []
        return own + [n for child in self.children for n in child.tensors()]


def _role_patterns() -> List[Tuple[Pattern[str], str]]:
    return [(re.compile("^" + re.escape(t).replace(r"\{i\}", r"(\d+)") + "$"), role)
            for role, t in DECODER_APR.items()]


def roles(names: List[str]) -> Dict[str, Tuple[Optional[str], Optional[int]]]:
    """{name: (contract role or None, layer or None)} through the detected name map."""
    out: Dict[str, Tuple[Optional[str], Optional[int]]] = {}
    found = detect(names)
    canonical: Dict[str, str] = {}
    if found is not None:
        try:
            canonical = name_map(found[0]).translate(names, found[1], "apr")
        except AprError:   # a map without APR names for some tensor: fall back
            canonical = {}
    patterns = _role_patterns()
    for name in names:
        role, layer = None, None
        apr_name = canonical.get(name)
        for pattern, candidate in patterns if apr_name else ():
            hit = pattern.match(apr_name)
            if hit:
                role, layer = candidate, int(hit.group(1)) if hit.groups() else None
                break
        if layer is None:
            numbered = _LAYER.match(name)
            layer = int(numbered.group(2)) if numbered else None
        out[name] = (role, layer)
    return out


def leaf(name: str, tensor: Any) -> Node:
    return Node("{}  {} {}".format(name, tensor.dtype.name, list(tensor.shape)), name)


def _ffn_flow(roles_here: List[Optional[str]]) -> str:
    if "gate" in roles_here:
        return "h → down(act(gate(h)) ⊙ up(h))"
    return "h → down(act(up(h)))"


def _block(title: str, members: List[Tuple[str, Optional[str]]],
           tensors: Mapping[str, Any]) -> Node:
    by_stage: Dict[str, List[Tuple[str, Optional[str]]]] = {}
    for name, role in sorted(members, key=lambda m: _ROLE_ORDER.get(m[1] or "", 99)):
        stage = ROLE_STAGE.get(role or "", "other")
        by_stage.setdefault(stage if stage in _BLOCK_STAGE_NAMES else "other",
                            []).append((name, role))
    block = Node(title)
    for stage, stage_title, flow in BLOCK_STAGES:
        if stage in _RESIDUAL_AFTER:
            if _RESIDUAL_AFTER[stage] in by_stage:
                block.children.append(Node("{}  {}".format(stage_title, flow)))
            continue
        if stage not in by_stage:
            continue
        if stage == "ffn":
            flow = _ffn_flow([r for _, r in by_stage[stage]])
        node = Node("{}  {}".format(stage_title, flow).rstrip(), expanded=True)
        node.children = [leaf(name, tensors[name]) for name, _ in by_stage[stage]]
        block.children.append(node)
    return block


def model_graph(tensors: Mapping[str, Any], summary: Optional[Dict[str, Any]] = None,
                title: str = "model") -> Node:
    """The graph of `tensors` ({name: tensor with .dtype.name and .shape}, file order);
    `summary` is `apr explain`'s model report (hyperparameters in the root's label)."""
    summary = summary or {}
    hyper = summary.get("hyperparameters") or {}
    names = list(tensors)
    found = roles(names)
    d_model = hyper.get("d_model", "d_model")
    n_vocab = hyper.get("n_vocab", "n_vocab")
    root = Node(_root_label(title, summary, len(names)), expanded=True)
    root.children.append(Node("input  token ids [T]"))
    globals_: Dict[str, List[str]] = {}
    layers: Dict[int, List[Tuple[str, Optional[str]]]] = {}
    prefixes: Dict[int, str] = {}
    for name in names:
        role, layer = found[name]
        if layer is not None:
            layers.setdefault(layer, []).append((name, role))
            numbered = _LAYER.match(name)
            prefixes.setdefault(layer, numbered.group(1) if numbered else str(layer))
        else:
            globals_.setdefault(ROLE_STAGE.get(role or "", "other"), []).append(name)

    def stage(label: str, key: str) -> None:
        if key in globals_:
            root.children.append(Node(label, children=[leaf(n, tensors[n])
                                                       for n in globals_.pop(key)],
                                      expanded=True))
    stage("embedding  token id → x [T, {}]".format(d_model), "embedding")
    stage("rope  rotary position frequencies", "rope")
    if layers:
        blocks = Node("blocks ×{}  x → norm → attention → + x → norm → FFN → + x"
                      .format(len(layers)), expanded=True)
        for number in sorted(layers):
            block = _block(prefixes[number], layers[number], tensors)
            block.expanded = number == min(layers)
            blocks.children.append(block)
        root.children.append(blocks)
    stage("output norm  x → norm(x)", "output_norm")
    if "lm_head" in globals_:
        stage("lm head  x → logits [T, {}]".format(n_vocab), "lm_head")
    elif "embedding" in [ROLE_STAGE.get(r or "") for r, _ in found.values()]:
        tied = [n for n in names if found[n][0] == "embedding"][0]
        root.children.append(Node("lm head  x → logits [T, {}]  (tied: {})".format(
            n_vocab, tied)))
    stage("other tensors", "other")
    root.children.append(Node("output  logits [T, {}] → next token".format(n_vocab)))
    return root


def _root_label(title: str, summary: Dict[str, Any], count: int) -> str:
    hyper = summary.get("hyperparameters")
    if not hyper:
        return "{}  {} tensors".format(title, count)
    return "{}  {}: {} layers, d_model {}, heads {}/{}, vocab {:,}".format(
        title, summary.get("display_name") or summary.get("family"), hyper["n_layers"],
        hyper["d_model"], hyper["n_heads"], hyper["n_kv_heads"], hyper["n_vocab"])


def filter_graph(node: Node, query: str) -> Optional[Node]:
    """The part of the graph whose tensors' names contain `query` (case-insensitive),
    with every kept node expanded; None when nothing matches. "" keeps the whole graph."""
    if not query:
        return node
    needle = query.lower()
    if node.tensor is not None:
        return node if needle in node.tensor.lower() else None
    kept = [c for c in (filter_graph(child, query) for child in node.children) if c]
    if not kept:
        return None
    return Node(node.label, None, kept, expanded=True)


def first_matrix(tensors: Mapping[str, Any]) -> Optional[str]:
    """The first 2-D tensor of the first block in data-flow order (blk.0's attention
    query for a LLaMA), the histogram view's default: a typical weight matrix, and far
    smaller than the embedding a file usually starts with. Else the first tensor."""
    names = list(tensors)
    found = roles(names)
    layers = [layer for _, layer in found.values() if layer is not None]
    if layers:
        block = sorted((n for n in names if found[n][1] == min(layers)),
                       key=lambda n: _ROLE_ORDER.get(found[n][0] or "", 99))
        for name in block:
            if len(tensors[name].shape) == 2:
                return name
    return names[0] if names else None
