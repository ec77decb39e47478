"""Tensor names across naming conventions (GGUF `blk.0.attn_q.weight` <-> HF
`model.layers.0.self_attn.q_proj.weight`), for `apr diff --tensor-mapping`.

Both sides are translated to the canonical APR names of seed 000 §10.8 through THE name
table, `apr_core.name_maps` (contract families, Whisper, BERT); nothing here restates a
name. A model whose names as a whole fit one architecture is translated with that map;
otherwise each name on its own, and names no map knows stay as they are.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from apr_core import name_maps
from apr_core.errors import AprError, ErrorCode
from apr_core.json_files import read_json_file


def canonical_names(names: List[str]) -> Dict[str, str]:
    """{name: canonical APR name} for a model's tensor names."""
    found = name_maps.detect(names)
    if found is not None:
        arch, scheme = found
        return name_maps.name_map(arch).translate(names, scheme, "apr")
    return {name: canonical(name) for name in names}


def canonical(name: str) -> str:
    """The canonical APR name of one tensor name, or the name itself when no map knows it."""
    for arch in name_maps.architectures():
        mapping = name_maps.name_map(arch)
        for scheme in mapping.schemes():
            if scheme != "apr" and mapping.known(name, scheme):
                return mapping.translate([name], scheme, "apr")[name]
    return name


def load_mapping(path: str) -> Dict[str, str]:
    """A user's JSON mapping {name in A: name in B}."""
    mapping = read_json_file(path, "tensor mapping")
    if not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise AprError(ErrorCode.FORMAT, "tensor mapping must be a JSON object of names",
                       path=path)
    return mapping


def pair_names(names_a: List[str], names_b: List[str], mapping: Optional[str]
               ) -> Tuple[List[Tuple[str, str]], List[str], List[str]]:
    """(pairs (a, b), only in A, only in B). `mapping`: None = same names, "auto" = across
    naming conventions, else a JSON file of explicit pairs (other names match as-is)."""
    if mapping is None:
        keys_a = {n: n for n in names_a}
        keys_b = {n: n for n in names_b}
    elif mapping == "auto":
        keys_a = canonical_names(names_a)
        keys_b = canonical_names(names_b)
    else:
        explicit = load_mapping(mapping)
        keys_a = {n: explicit.get(n, n) for n in names_a}
        keys_b = {n: n for n in names_b}
    by_key_b = {key: n for n, key in keys_b.items()}
    pairs = [(a, by_key_b[keys_a[a]]) for a in names_a if keys_a[a] in by_key_b]
    matched_b = {b for _, b in pairs}
    only_a = [a for a in names_a if keys_a[a] not in by_key_b]
    only_b = [b for b in names_b if b not in matched_b]
    return pairs, only_a, only_b
