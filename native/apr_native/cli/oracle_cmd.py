"""`apr oracle`: a model file checked against its family contract (seed 004 §2.6, §15).

    apr oracle FILE [--family F]      which family, which size variant, and every tensor the
                                      contract names: present, with the contract's shape
                                      (canonical APR names are read as their source names)
    apr oracle --family qwen2 [--size 0.5b]   describe a contract (no file)

The contracts are `contracts/*.yaml`, read through apr_core's packaged copy
(`apr_core.model.families`). A file that breaks its contract (missing tensor, wrong shape,
a hyperparameter violating an invariant, an unknown architecture) exits 5.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Dict, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.open import open_model
from apr_core.model.families import Family, contracts, resolve_tensors
from apr_core.model.transformer import model_config, read_hf_config

from ..config import wants_json
from .common import EXIT_OK, EXIT_VALIDATION, emit_json, resolve_model
from .export_cmd import source_named


# Contract size-variant keys -> ModelConfig fields.
VARIANT_FIELDS = (("hidden_dim", "d_model"), ("num_layers", "n_layers"),
                  ("num_heads", "n_heads"), ("num_kv_heads", "n_kv_heads"),
                  ("intermediate_dim", "d_ff"), ("vocab_size", "n_vocab"),
                  ("head_dim", "head_dim"))


def size_variant(family: Family, config: Any) -> Optional[str]:
    """The contract size variant whose dims all equal the model's, or None."""
    for name, dims in family.contract.get("size_variants", {}).items():
        if all(getattr(config, field) == dims[key] for key, field in VARIANT_FIELDS
               if key in dims):
            return name
    return None


def check_file(path: str, family_name: Optional[str]) -> Dict[str, Any]:
    """The oracle report for one file; `passed` False with the error when it fails."""
    result: Dict[str, Any] = {"path": path, "passed": False}
    named = source_named(path) if os.path.isfile(path) else path
    with (open_model(named) if isinstance(named, str) else named) as model:
        try:
            hf = read_hf_config(path) if os.path.isdir(path) else None
            config = model_config(model, hf)
            family = Family(config.arch, contracts()[config.arch])
            result.update(family=family.name, display_name=family.contract.get("display_name"),
                          source=config.source, size_variant=size_variant(family, config),
                          constraints=family.constraints)
            if family_name and family_name != family.name:
                raise AprError(ErrorCode.VALIDATION, "model is not of the expected family",
                               expected=family_name, found=family.name)
            where = resolve_tensors(family, config.source, config.dims(), config.flags(),
                                    config.n_layers, model.tensors)
            result["roles_checked"] = sum(1 for v in where.values() if v is not None)
            result["tensors"] = len(model.tensors)
            result["passed"] = True
        except AprError as err:
            result["error"] = err.to_dict()
    return result


def describe(family_name: str, size: Optional[str]) -> Dict[str, Any]:
    if family_name not in contracts():
        raise AprError(ErrorCode.ARGUMENT, "no such model family", family=family_name,
                       known=sorted(contracts()))
    contract = contracts()[family_name]
    variants = contract.get("size_variants", {})
    if size is not None and size not in variants:
        raise AprError(ErrorCode.ARGUMENT, "no such size variant", family=family_name,
                       size=size, known=sorted(variants))
    return {"family": family_name, "display_name": contract.get("display_name"),
            "architectures": contract.get("architectures"),
            "constraints": contract.get("constraints"),
            "size_variants": {size: variants[size]} if size else variants,
            "tensors": contract.get("tensors")}


def run_oracle(args: argparse.Namespace) -> int:
    if args.model is None:
        if not args.family:
            raise AprError(ErrorCode.ARGUMENT, "give a model file or --family")
        info = describe(args.family, args.size)
        if wants_json(args):
            emit_json(info)
        else:
            print("{} ({})".format(info["display_name"], info["family"]))
            for key, value in sorted((info["constraints"] or {}).items()):
                print("  {}: {}".format(key, value))
            for name, dims in info["size_variants"].items():
                print("  size {}: {}".format(name, ", ".join(
                    "{}={}".format(k, v) for k, v in dims.items())))
        return EXIT_OK
    result = check_file(resolve_model(args.model), args.family)
    if wants_json(args):
        emit_json(result)
    elif result["passed"]:
        print("PASS {}: {} ({}), size {}, {} contract roles present with contract shapes"
              .format(result["path"], result["display_name"], result["source"],
                      result["size_variant"] or "custom", result["roles_checked"]))
    else:
        err = result["error"]
        print("FAIL {}: {} {}: {} {}".format(result["path"], err["code"], err["category"],
                                             err["message"], err["context"]))
    return EXIT_OK if result["passed"] else EXIT_VALIDATION


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("oracle", help="check a model against its family contract")
    p.add_argument("model", nargs="?")
    p.add_argument("--family", help="expected family (or, without a model, the one to "
                   "describe): " + ", ".join(sorted(contracts())))
    p.add_argument("--size", help="with --family alone: one size variant")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_oracle)
