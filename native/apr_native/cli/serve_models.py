"""`apr serve A B C` / `apr serve --models-dir DIR`: one server, many models
(server/model_router.py routes by the request's `model`, loads on first use and unloads
the least recently used past `--max-models` or `--models-memory`).

A model's id is its file name (a reference's own text, e.g. `hf://org/repo/file.gguf`).
`--models-dir` serves every `.gguf` and `.apr` file in DIR, and every line of its `*.ref`
files that names a reference (`hf://...`, `https://...`; `#` starts a comment).
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict, List

from apr_core.errors import AprError, ErrorCode

MODEL_SUFFIXES = (".gguf", ".apr")
REFERENCE_SUFFIX = ".ref"
REFERENCE_SCHEMES = ("hf://", "https://", "http://")
DEFAULT_MAX_MODELS = 4          # llama-server's --models-max default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models-dir", metavar="DIR",
                   help="serve every .gguf/.apr file in DIR and the references listed in "
                   "its *.ref files, loaded on first use")
    p.add_argument("--max-models", type=int, default=DEFAULT_MAX_MODELS,
                   help="models loaded at once when serving several; past it the least "
                   "recently used unloads")
    p.add_argument("--models-memory", metavar="SIZE",
                   help="memory budget of the loaded models' files plus their KV caches "
                   "(e.g. 2G); past it the least recently used unloads (default: none)")


def scan_dir(folder: str) -> List[str]:
    """The models of `--models-dir`: model files, then the references of *.ref files."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as err:
        raise AprError(ErrorCode.IO, "cannot read --models-dir", path=folder,
                       error=err.strerror or str(err))
    found = [os.path.join(folder, n) for n in names if n.lower().endswith(MODEL_SUFFIXES)]
    for name in names:
        if name.lower().endswith(REFERENCE_SUFFIX):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for line in f:
                    ref = line.split("#", 1)[0].strip()
                    if ref.startswith(REFERENCE_SCHEMES):
                        found.append(ref)
    return found


def model_refs(names: List[str], folder: Any, model_id_for: Callable[[str], str]
               ) -> Dict[str, str]:
    """id -> reference for every model served (`model_id_for(ref)`: its id); E011 for none
    or for two with one id."""
    refs: Dict[str, str] = {}
    for ref in list(names) + (scan_dir(folder) if folder else []):
        model_id = model_id_for(ref)
        if model_id in refs and refs[model_id] != ref:
            raise AprError(ErrorCode.ARGUMENT, "two models would share the id '{}'".format(
                model_id), first=refs[model_id], second=ref)
        refs[model_id] = ref
    if not refs:
        raise AprError(ErrorCode.ARGUMENT, "no model to serve: name one or more, or "
                       "--models-dir DIR with .gguf/.apr files" + (
                           " (none in {})".format(folder) if folder else ""))
    return refs


def run(args: argparse.Namespace, names: List[str], settings: Any, log: Any,
        make_engine: Callable[[str, str], Any], model_id_for: Callable[[str], str],
        serve: Callable[[Any, str], int]) -> int:
    """Build the router and its app over `make_engine(ref, model_id)` and hand them to
    `serve(app, names of the models)`."""
    from apr_native.server.app import create_app
    from apr_native.server.model_router import ModelRouter, file_size
    from apr_native.server.router_app import create_router_app
    from .common import parse_size
    if args.model_id:
        raise AprError(ErrorCode.ARGUMENT, "--model-id names a single model; with several "
                       "each is known by its file name")
    if args.max_models < 1:
        raise AprError(ErrorCode.ARGUMENT, "--max-models {} is out of range: it takes 1 or "
                       "more".format(args.max_models))
    refs = model_refs(names, args.models_dir, model_id_for)
    kv = parse_size(args.kv_memory)
    sizes = {mid: file_size(ref) + kv for mid, ref in refs.items()}
    budget = parse_size(args.models_memory) if args.models_memory else 0

    def start(model_id: str, ref: str) -> Any:
        """Worker thread: the model's engine, loading in its own thread, and its app."""
        engine = make_engine(ref, model_id)
        engine.start()
        return engine, create_app(engine, settings, manage_engine=False)

    router = ModelRouter(refs, start, max_models=args.max_models, memory_budget=budget,
                         sizes=sizes, log=log)
    return serve(create_router_app(router, settings), ", ".join(refs))


__all__ = ["add_arguments", "model_refs", "run", "scan_dir"]
