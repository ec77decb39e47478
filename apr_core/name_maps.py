"""Tensor name maps between naming schemes (seed 000 §10.8, §13.5): THE table module.

Schemes: "hf" (transformers names, `model.layers.0.self_attn.q_proj.weight`), "gguf"
(llama.cpp names, `blk.0.attn_q.weight`) and "apr" (the canonical APR names of seed 000
§10.8, `layers.0.attn.q_proj.weight`, `token_embedding`).

For the decoder families that have a contract (llama, qwen2, gpt2, mistral, gemma3) the
"hf" and "gguf" names come from the contract itself (`contracts/*.yaml`), so they are never
written twice; this module adds each contract role's APR name (`DECODER_APR`). Whisper and
BERT, which have no runtime contract, are tables of (hf, apr) templates here. Templates use
`{i}` for a layer number.

    name_map("llama").translate(names, "hf", "apr")   -> {old: new}; unknown names fail
    detect(names)                                      -> (arch, scheme) or None

Only names change here: a GPT-2 HF Conv1D weight keeps its [in, out] layout and a LLaMA
GGUF Q/K keeps llama.cpp's row permutation, so the scheme a file came from is recorded
next to the names by the importer (`name_source`).
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Pattern, Sequence, Tuple

from .errors import AprError, ErrorCode
from .model.families import contracts

SCHEMES = ("hf", "gguf", "apr")

# Contract role -> canonical APR name. Every role of every contract must be here
# (tests/cli/test_cli_import.py checks it), so a new family cannot silently lack APR names.
DECODER_APR = {
    "embedding": "token_embedding",
    "position_embedding": "positional_embedding",
    "output_norm": "output_norm.weight",
    "output_norm_bias": "output_norm.bias",
    "lm_head": "lm_head.weight",
    "rope_freqs": "rope_freqs",
    "attn_norm": "layers.{i}.attn_norm.weight",
    "attn_norm_bias": "layers.{i}.attn_norm.bias",
    "q": "layers.{i}.attn.q_proj.weight",
    "k": "layers.{i}.attn.k_proj.weight",
    "v": "layers.{i}.attn.v_proj.weight",
    "o": "layers.{i}.attn.o_proj.weight",
    "q_bias": "layers.{i}.attn.q_proj.bias",
    "k_bias": "layers.{i}.attn.k_proj.bias",
    "v_bias": "layers.{i}.attn.v_proj.bias",
    "o_bias": "layers.{i}.attn.o_proj.bias",
    "qkv": "layers.{i}.attn.qkv_proj.weight",
    "qkv_bias": "layers.{i}.attn.qkv_proj.bias",
    "q_norm": "layers.{i}.attn.q_norm.weight",
    "k_norm": "layers.{i}.attn.k_norm.weight",
    "post_attn_norm": "layers.{i}.post_attn_norm.weight",
    "ffn_norm": "layers.{i}.ffn_norm.weight",
    "ffn_norm_bias": "layers.{i}.ffn_norm.bias",
    "post_ffn_norm": "layers.{i}.post_ffn_norm.weight",
    "gate": "layers.{i}.mlp.gate_proj.weight",
    "up": "layers.{i}.mlp.up_proj.weight",
    "down": "layers.{i}.mlp.down_proj.weight",
    "up_bias": "layers.{i}.mlp.up_proj.bias",
    "down_bias": "layers.{i}.mlp.down_proj.bias",
}


def _whisper_rows() -> List[Tuple[str, str]]:
    """(hf, apr) for HF Whisper (seed 000 §10.8 "Full HuggingFace Whisper Mapping")."""
    rows = [("encoder.conv1.weight", "encoder.conv1.weight"),
            ("encoder.conv1.bias", "encoder.conv1.bias"),
            ("encoder.conv2.weight", "encoder.conv2.weight"),
            ("encoder.conv2.bias", "encoder.conv2.bias"),
            ("encoder.embed_positions.weight", "encoder.positional_embedding"),
            ("decoder.embed_tokens.weight", "decoder.token_embedding"),
            ("decoder.embed_positions.weight", "decoder.positional_embedding"),
            ("proj_out.weight", "decoder.proj_out.weight")]
    attn = ["{}.{}_proj.{}".format(block, p, wb) for block in ("self_attn", "encoder_attn")
            for p in ("q", "k", "v", "out") for wb in ("weight", "bias")]
    norms = ["{}.{}".format(n, wb) for n in ("self_attn_layer_norm", "encoder_attn_layer_norm",
                                             "final_layer_norm") for wb in ("weight", "bias")]
    mlp = ["{}.{}".format(fc, wb) for fc in ("fc1", "fc2") for wb in ("weight", "bias")]
    for side in ("encoder", "decoder"):
        rows += [("{}.layer_norm.{}".format(side, wb),) * 2 for wb in ("weight", "bias")]
        for suffix in attn + norms + mlp:
            if side == "encoder" and suffix.startswith(("encoder_attn",)):
                continue
            name = "{}.layers.{{i}}.{}".format(side, suffix)
            rows.append((name, name))
    return rows


_BERT_LAYER = (
    ("attention.self.query", "attn.q_proj"), ("attention.self.key", "attn.k_proj"),
    ("attention.self.value", "attn.v_proj"), ("attention.output.dense", "attn.out_proj"),
    ("attention.output.LayerNorm", "attn_layer_norm"), ("intermediate.dense", "fc1"),
    ("output.dense", "fc2"), ("output.LayerNorm", "final_layer_norm"),
)


def _bert_rows() -> List[Tuple[str, str]]:
    rows = [("embeddings.word_embeddings.weight", "token_embedding"),
            ("embeddings.position_embeddings.weight", "positional_embedding"),
            ("embeddings.token_type_embeddings.weight", "token_type_embedding"),
            ("embeddings.LayerNorm.weight", "embeddings.layer_norm.weight"),
            ("embeddings.LayerNorm.bias", "embeddings.layer_norm.bias"),
            ("pooler.dense.weight", "pooler.dense.weight"),
            ("pooler.dense.bias", "pooler.dense.bias")]
    for hf, apr in _BERT_LAYER:
        for wb in ("weight", "bias"):
            rows.append(("encoder.layer.{{i}}.{}.{}".format(hf, wb),
                         "layers.{{i}}.{}.{}".format(apr, wb)))
    return rows


# arch -> (rows of (hf, apr), hf prefixes tried in order). THE non-contract table.
EXTRA_MAPS = {
    "whisper": (_whisper_rows(), ("model.", "")),
    "bert": (_bert_rows(), ("bert.", "")),
}


def _pattern(template: str) -> Pattern[str]:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(\d+)") + "$")


class NameMap(NamedTuple):
    """One architecture's rows ({scheme: template}) and per-scheme name prefixes."""

    arch: str
    rows: Tuple[Dict[str, str], ...]
    prefixes: Dict[str, Tuple[str, ...]]
    required: Tuple[bool, ...] = ()     # per row: every file of this family has it

    def schemes(self) -> Tuple[str, ...]:
        return tuple(s for s in SCHEMES if any(s in row for row in self.rows))

    def _match(self, name: str, scheme: str) -> Optional[Tuple[Dict[str, str], Optional[str]]]:
        for prefix in self.prefixes.get(scheme, ("",)):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            for row in self.rows:
                template = row.get(scheme)
                if template is None:
                    continue
                found = _pattern(template).match(rest)
                if found:
                    return row, (found.group(1) if found.groups() else None)
        return None

    def known(self, name: str, scheme: str) -> bool:
        return self._match(name, scheme) is not None

    def translate(self, names: Iterable[str], src: str, dst: str) -> Dict[str, str]:
        """{name: translated} for every name; AprError(NOT_FOUND) naming the first name
        the map does not know, or that has no `dst` form."""
        out: Dict[str, str] = {}
        for name in names:
            hit = self._match(name, src)
            if hit is None or dst not in hit[0]:
                raise AprError(ErrorCode.NOT_FOUND, "tensor name is not in the {} name map"
                               .format(self.arch), tensor=name, scheme=src, target=dst)
            row, layer = hit
            new = row[dst] if layer is None else row[dst].replace("{i}", layer)
            out[name] = self.prefixes.get(dst, ("",))[0] + new if dst == "hf" else new
        if len(set(out.values())) != len(out):
            raise AprError(ErrorCode.VALIDATION, "two tensors map to the same name",
                           arch=self.arch, target=dst)
        return out


def _contract_map(family: str) -> NameMap:
    contract = contracts()[family]
    rows, required = [], []
    for scope in ("global", "layer"):
        for role, entry in contract["tensors"].get(scope, {}).items():
            row = {s: entry[s] for s in ("hf", "gguf") if s in entry}
            row["apr"] = DECODER_APR[role]
            rows.append(row)
            # A `when` role is required when the family's constraints switch it on
            # (Qwen2's qkv_bias): that is what tells a Qwen2 file from a LLaMA one.
            when = entry.get("when")
            required.append(not (entry.get("optional") or entry.get("fallback")) and
                            (not when or bool(contract.get("constraints", {}).get(when))))
    return NameMap(family, tuple(rows), {"hf": tuple(contract.get("hf_prefixes", [""]))},
                   tuple(required))


def architectures() -> Tuple[str, ...]:
    """Every architecture a name map exists for."""
    return tuple(sorted(set(contracts()) | set(EXTRA_MAPS)))


def name_map(arch: str) -> NameMap:
    """The name map of `arch` (a family name, `whisper` or `bert`)."""
    if arch in EXTRA_MAPS:
        rows, prefixes = EXTRA_MAPS[arch]
        return NameMap(arch, tuple({"hf": hf, "apr": apr} for hf, apr in rows),
                       {"hf": prefixes})
    if arch in contracts():
        return _contract_map(arch)
    raise AprError(ErrorCode.ARGUMENT, "no tensor name map for this architecture", arch=arch,
                   known=list(architectures()))


# Name-based detection tie-break: families whose names coincide (llama, mistral) resolve
# to the first listed.
PREFERENCE = ("llama", "qwen2", "gpt2", "gemma3", "mistral", "whisper", "bert")


def detect(names: Sequence[str]) -> Optional[Tuple[str, str]]:
    """(arch, scheme) from tensor names alone, or None (metadata, when present, is the
    better witness). A candidate's map must know every name and find each of its required
    rows; the candidate matching the most required rows wins (a Qwen2 file's unconditional
    Q/K/V biases beat LLaMA's optional ones), ties going by `PREFERENCE`."""
    names = list(names)
    best: Optional[Tuple[int, int, str, str]] = None
    for arch in architectures():
        mapping = name_map(arch)
        for scheme in mapping.schemes():
            hits = [mapping._match(n, scheme) for n in names]
            if not names or any(h is None for h in hits):
                continue
            used = {id(h[0]) for h in hits if h is not None}
            need = [id(row) for row, req in zip(mapping.rows, mapping.required)
                    if req and scheme in row]
            if any(r not in used for r in need):
                continue
            rank = PREFERENCE.index(arch) if arch in PREFERENCE else len(PREFERENCE)
            key = (-len(need), rank, arch, scheme)
            if best is None or key < best:
                best = key
    return None if best is None else (best[2], best[3])


__all__ = ["SCHEMES", "DECODER_APR", "EXTRA_MAPS", "NameMap", "name_map", "architectures",
           "detect"]
