"""`apr merge A B ... --strategy average|weighted|ties|dare|slerp -o OUT` (seed 000 §4.9).

The models must have the same tensor names and shapes (any mix of APR, GGUF, SafeTensors);
tensors are merged one at a time in float64 (`apr_core.transforms.merge`) and written in
their original dtype when it can be re-encoded, else F32; the first model's metadata is
kept with a `merge` record added.
"""
from __future__ import annotations

import argparse
import time
from typing import List, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import convert
from apr_core.formats.open import open_model
from apr_core.transforms.merge import STRATEGIES, merge_models

from ..config import wants_json
from .common import check_output, emit_json, resolve_model
from .quantize_cmd import progress_bar


def _weights(text: Optional[str], count: int) -> Optional[List[float]]:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise AprError(ErrorCode.ARGUMENT, "--weights must be comma-separated numbers",
                       weights=text)
    if len(values) != count:
        raise AprError(ErrorCode.ARGUMENT, "need one weight per model", weights=len(values),
                       models=count)
    return values


def run_merge(args: argparse.Namespace) -> int:
    if len(args.models) < 2:
        raise AprError(ErrorCode.ARGUMENT, "merge needs at least two models")
    if args.strategy == "weighted" and args.weights is None:
        raise AprError(ErrorCode.ARGUMENT, "--strategy weighted needs --weights w1,w2,...")
    check_output(args.output, args.force)
    paths = [resolve_model(m) for m in args.models]
    models = [open_model(p) for p in paths]
    base = open_model(resolve_model(args.base)) if args.base else None
    start = time.perf_counter()
    try:
        view = merge_models(models, args.strategy, weights=_weights(args.weights, len(models)),
                            base=base, density=args.density, lam=args.lam, t=args.t,
                            seed=args.seed)
        with progress_bar("merging") as progress:
            fmt = convert(view, args.output, None, quantize=args.quantize, overwrite=True,
                          force=args.force, progress=progress or (lambda *a: None))
    finally:
        for model in models + ([base] if base is not None else []):
            model.close()
    result = {"inputs": paths, "output": args.output, "format": fmt,
              "strategy": args.strategy, "tensors": len(view.tensors),
              "seconds": round(time.perf_counter() - start, 3)}
    if wants_json(args):
        emit_json(result)
    else:
        print("merged {} models ({}) -> {}: {} tensors in {:.2f}s".format(
            len(paths), args.strategy, args.output, result["tensors"], result["seconds"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="merge models: average, weighted, ties, dare, slerp")
    p.add_argument("models", nargs="+", help="two or more models with the same tensors")
    p.add_argument("--strategy", choices=STRATEGIES, default="average")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--weights", help="weighted/dare: one weight per model, e.g. 0.7,0.3")
    p.add_argument("--base", help="ties/dare: the base model task vectors are taken from "
                   "(default: zero)")
    p.add_argument("--density", type=float, default=0.5,
                   help="ties: fraction of each task vector kept; dare: keep probability")
    p.add_argument("--lambda", dest="lam", type=float, default=1.0,
                   help="ties/dare: scale of the merged task vector")
    p.add_argument("--t", type=float, default=0.5, help="slerp: interpolation point in [0, 1]")
    p.add_argument("--seed", type=int, default=0, help="dare: random seed")
    p.add_argument("--quantize", metavar="TYPE|FILETYPE", help="quantize the merged model")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_merge)
