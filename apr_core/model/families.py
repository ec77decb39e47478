"""Model-family contracts (seed 004 §15.4): which family a file is, and its tensors checked.

The source of truth is `contracts/<family>.yaml`; apr_core reads the generated copy
`apr_core/data/contracts.json` (no PyYAML in Pyodide). A contract gives, per family:
the architecture names that select it in each *source* naming scheme ("gguf": llama.cpp
names such as `blk.{i}.attn_q.weight`; "hf": transformers names such as
`model.layers.{i}.self_attn.q_proj.weight`), constraints (activation, norm, MLP type ...),
the RoPE convention and norm-weight offset per source, and every tensor's name template
and row-major shape written with ModelConfig dims (`[q_dim, d_model]`).

`resolve_tensors` checks a model file against its contract before any weight is read:
a missing tensor is `AprError(NOT_FOUND)`, a wrong shape `AprError(VALIDATION)`, both with
the tensor name, family and expected/actual values.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .. import package_data
from ..errors import AprError, ErrorCode

SOURCES = ("gguf", "hf")
_CONTRACTS: Optional[Dict[str, Dict[str, Any]]] = None


def contracts() -> Dict[str, Dict[str, Any]]:
    """{family: contract} from the packaged contracts.json (read once)."""
    global _CONTRACTS
    if _CONTRACTS is None:
        data = package_data.read("data/contracts.json")
        if data is None:
            raise AprError(ErrorCode.IO, "apr_core/data/contracts.json is missing")
        _CONTRACTS = json.loads(data.decode("utf-8"))["families"]
    return _CONTRACTS


class TensorSpec(NamedTuple):
    """One tensor role of a family: `scope` is "global" or "layer" (name has `{i}`)."""

    role: str
    scope: str
    names: Dict[str, str]          # source -> name template
    shape: Tuple[str, ...]         # dim expressions, row-major
    when: Optional[str]            # required iff this config flag is true
    optional: bool                 # loaded when present, never required
    fallback: Optional[str]        # role used instead (tied lm_head -> embedding)
    hf_transposed: bool            # HF stores it [in, out] (GPT-2 Conv1D)


class Family(NamedTuple):
    """A family contract with typed accessors."""

    name: str
    contract: Dict[str, Any]

    @property
    def constraints(self) -> Dict[str, Any]:
        return self.contract.get("constraints", {})

    def rope_style(self, source: str) -> str:
        return self._per_source("rope_style", source)

    def norm_weight_offset(self, source: str) -> float:
        return float(self._per_source("norm_weight_offset", source))

    def _per_source(self, key: str, source: str) -> Any:
        table = self.contract.get(key, {})
        if source not in table:
            raise AprError(ErrorCode.UNSUPPORTED, "family has no {} for this source".format(key),
                           family=self.name, source=source)
        return table[source]

    def specs(self) -> List[TensorSpec]:
        out = []
        for scope in ("global", "layer"):
            for role, entry in self.contract["tensors"].get(scope, {}).items():
                out.append(TensorSpec(
                    role, scope, {s: entry[s] for s in SOURCES if s in entry},
                    tuple(str(d) for d in entry["shape"]), entry.get("when"),
                    bool(entry.get("optional", False)), entry.get("fallback"),
                    bool(entry.get("hf_transposed", False))))
        return out

    def prefixes(self, source: str) -> Tuple[str, ...]:
        """Name prefixes to try (GPT-2 HF files may or may not say "transformer.")."""
        if source == "hf":
            return tuple(self.contract.get("hf_prefixes", [""]))
        return ("",)


def family_for(arch: str, source: str) -> Family:
    """The family whose contract lists `arch` for `source`, or AprError(UNSUPPORTED)."""
    for name, contract in sorted(contracts().items()):
        if arch in contract.get("architectures", {}).get(source, []):
            return Family(name, contract)
    raise AprError(ErrorCode.UNSUPPORTED, "no model-family contract for this architecture",
                   architecture=arch, source=source,
                   known=sorted(a for c in contracts().values()
                                for a in c.get("architectures", {}).get(source, [])))


def detect_source(tensor_names: Any, family: Family) -> str:
    """Which naming scheme the file uses: the source whose embedding tensor is present."""
    for source in SOURCES:
        template = family.contract["tensors"]["global"]["embedding"].get(source)
        if template is None:
            continue
        for prefix in family.prefixes(source):
            if prefix + template in tensor_names:
                return source
    raise AprError(ErrorCode.NOT_FOUND, "model has no embedding tensor its family names",
                   family=family.name)


def eval_dim(expr: str, dims: Dict[str, int]) -> int:
    """Evaluate a contract dim expression: `+`-separated terms of `*`-separated factors,
    each an integer literal or a dim name (`n_heads*head_dim`, `q_dim+2*kv_dim`)."""
    total = 0
    for term in expr.replace(" ", "").split("+"):
        value = 1
        for factor in term.split("*"):
            if factor.isdigit():
                value *= int(factor)
            elif factor in dims:
                value *= int(dims[factor])
            else:
                raise AprError(ErrorCode.VALIDATION, "unknown dim in contract shape",
                               expr=expr, dim=factor)
        total += value
    return total


class Resolved(NamedTuple):
    """Where a role's tensor is in the file (`name`), and whether HF stored it [in, out]."""

    name: str
    transposed: bool


def resolve_tensors(family: Family, source: str, dims: Dict[str, int], flags: Dict[str, bool],
                    n_layers: int, tensors: Dict[str, Any]
                    ) -> Dict[Tuple[int, str], Optional[Resolved]]:
    """Check `tensors` (name -> TensorInfo) against the contract; map (layer, role) -> tensor.

    Global roles use layer -1. A role whose `when` flag is false, or an absent optional
    tensor, maps to None; a role with a fallback (the LM head) maps to the fallback's
    tensor when the config flag `tied_embeddings` is set, and is required otherwise.
    """
    specs = family.specs()
    by_role = {spec.role: spec for spec in specs}
    out: Dict[Tuple[int, str], Optional[Resolved]] = {}
    for spec in specs:
        for layer in (range(n_layers) if spec.scope == "layer" else (-1,)):
            out[(layer, spec.role)] = _resolve_one(family, source, spec, layer, dims, flags,
                                                   tensors)
    for (layer, role), found in list(out.items()):
        spec = by_role[role]
        if found is None and spec.fallback and flags.get("tied_embeddings", False):
            out[(layer, role)] = out[(layer, spec.fallback)]
    return out


def _resolve_one(family: Family, source: str, spec: TensorSpec, layer: int,
                 dims: Dict[str, int], flags: Dict[str, bool],
                 tensors: Dict[str, Any]) -> Optional[Resolved]:
    template = spec.names.get(source)
    if template is None or (spec.when is not None and not flags.get(spec.when, False)):
        return None
    if spec.fallback and flags.get("tied_embeddings", False):
        return None
    base = template.replace("{i}", str(layer))
    name = next((p + base for p in family.prefixes(source) if p + base in tensors), None)
    if name is None:
        if spec.optional:
            return None
        raise AprError(ErrorCode.NOT_FOUND, "model is missing a tensor its family contract "
                       "requires", tensor=family.prefixes(source)[0] + base,
                       family=family.name, role=spec.role, source=source)
    transposed = spec.hf_transposed and source == "hf"
    expected = tuple(eval_dim(d, dims) for d in spec.shape)
    if transposed:
        expected = expected[::-1]
    got = tuple(tensors[name].shape)
    if got != expected:
        raise AprError(ErrorCode.VALIDATION, "tensor shape does not match the family contract",
                       tensor=name, family=family.name, role=spec.role, expected=expected,
                       got=got)
    return Resolved(name, transposed)


__all__ = ["contracts", "Family", "TensorSpec", "Resolved", "family_for", "detect_source",
           "eval_dim", "resolve_tensors", "SOURCES"]
