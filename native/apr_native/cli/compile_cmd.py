"""`apr compile MODEL --target pyz -o model.pyz`: pack a model with apr_core into a program
that runs elsewhere (`apr_native/compile/`, one module per target).

    apr compile demo --target pyz -o demo.pyz            python demo.pyz "Hi"  (numpy only)
    apr compile model.gguf -o m.pyz --external           store the path, not the bytes
    apr compile model.gguf -o m.pyz --external https://host/model.gguf
    apr compile demo --target web -o site/               a static site (page, Pyodide, shards)
    apr compile model.gguf --target web -o site/ --quantize Q4_K_M --max-shard 32M

    apr compile demo --target worker -o bundle/          a JavaScript Worker bundle (workerd,
                                                         Cloudflare) carrying Pyodide: OpenAI's API
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from typing import Any, Callable, Dict, Iterator, Optional

from apr_core.errors import AprError, ErrorCode

from .commands import help_line
from .common import check_output, emit_json, human_bytes, parse_size, quiet, resolve_model
from .render import print_table, wants_json


_URL_PREFIXES = ("http://", "https://")
# options only some targets take: argparse dest -> flag; a builder module lists the ones
# it takes in OPTIONS (apr_native/compile/web.py)
TARGET_OPTIONS = {"quantize": "--quantize", "max_shard": "--max-shard", "compress": "--compress"}


def default_output(model: str, target: str) -> str:
    stem = os.path.basename(os.path.normpath(model)).split("#", 1)[0]
    for suffix in (".gguf", ".apr", ".safetensors"):
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
    return "{}.{}".format(stem or "model", target)


def external_location(given: str, model: str, path: str) -> str:
    """What the archive stores with --external: the location given, else the URL the
    model was named by, else its absolute path."""
    if given:
        return given
    if model.startswith(_URL_PREFIXES):
        return model.split("#", 1)[0]
    return os.path.abspath(path)


def run_compile(args: argparse.Namespace) -> int:
    from apr_native.compile import BUILDERS
    if args.target not in BUILDERS:
        raise AprError(ErrorCode.UNSUPPORTED, "--target {} is not built yet (built: {})"
                       .format(args.target, ", ".join(sorted(BUILDERS))), target=args.target)
    builder = importlib.import_module("apr_native.compile." + BUILDERS[args.target])
    options = target_options(args, getattr(builder, "OPTIONS", ()))
    path = resolve_model(args.model)
    output = args.output or default_output(args.model, args.target)
    check_output(output, args.force)
    external = None if args.external is None else \
        external_location(args.external, args.model, path)
    with _byte_progress("packing " + os.path.basename(output)) as progress:
        report = builder.build(path, output, external=external, overwrite=args.force,
                               progress=progress, **options)
    if wants_json(args):
        emit_json(report)
    else:
        getattr(builder, "print_report", _print_report)(report)
    return 0


def target_options(args: argparse.Namespace, taken: Any) -> Dict[str, Any]:
    """The target-specific options given, for a builder taking `taken`; one the target
    does not take is an error, not silently ignored."""
    options: Dict[str, Any] = {}
    for dest, flag in TARGET_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest not in taken:
            raise AprError(ErrorCode.ARGUMENT, "{} does not apply to --target {}".format(
                flag, args.target), target=args.target)
        options[dest] = parse_size(value) if dest == "max_shard" else value
    return options


@contextlib.contextmanager
def _byte_progress(description: str) -> Iterator[Optional[Callable[[int, int], None]]]:
    """A rich progress bar on stderr fed `(done, total)` bytes; None when quiet."""
    if quiet():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_report(report: Dict[str, Any]) -> None:
    model = report["model"]
    parts = report["parts"]
    rows = [("runner (__main__.py, apr_pyz/)", human_bytes(parts["runner"])),
            ("apr_core", human_bytes(parts["apr_core"])),
            ("model " + (model.get("member") or "(external: {})".format(model["external"])),
             human_bytes(parts["model"])),
            ("zip directory and headers", human_bytes(report["overhead"])),
            ("total", human_bytes(report["size"]))]
    print_table("wrote {}".format(report["output"]), ["part", "size"], rows, right=["size"])
    print("run it: python {} \"prompt\"   (needs Python 3.8+ and numpy)".format(
        report["output"]))


def register(sub: argparse._SubParsersAction) -> None:
    from apr_native.compile import TARGETS
    p = sub.add_parser("compile", help=help_line("compile"), description=(
        "Pack a model with apr_core into one program. --target pyz: a Python zipapp; "
        "`python model.pyz \"prompt\"` answers as `apr run MODEL \"prompt\" --chat` does, "
        "on any machine with Python 3.8+ and numpy. --target web: a folder any static file "
        "server hosts (python -m http.server, GitHub Pages); the page loads the model on "
        "open and caches its shards in the browser."))
    p.add_argument("model", help="model file (.gguf, .apr) or a built-in name ('demo')")
    p.add_argument("--target", choices=TARGETS, default="pyz",
                   help="pyz (a Python zipapp; the default), web (a static site folder: "
                   "page, Pyodide, the model's shards), worker (a JavaScript Worker "
                   "bundle folder for workerd / Cloudflare, carrying its own Pyodide: "
                   "/v1/completions, /v1/chat/completions)")
    p.add_argument("-o", "--output", help="output file, a folder for web (default: MODEL's "
                   "name + .pyz or .web)")
    p.add_argument("--external", nargs="?", const="", metavar="PATH|URL",
                   help="store where the model is instead of its bytes: this path or URL, "
                   "else MODEL's URL or absolute path (put it after MODEL)")
    p.add_argument("--quantize", metavar="TYPE", help="web: re-quantize the model's shards "
                   "first, as `apr quantize` (q4_k, q8_0, or a file type such as Q4_K_M)")
    p.add_argument("--max-shard", metavar="SIZE", help="web: largest shard (default 64M; "
                   "GitHub Pages takes files up to 100 MB)")
    p.add_argument("--compress", choices=["lz4"], help="web: LZ4-compress the shards' "
                   "payloads (smaller files; the page decompresses them in Python)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite the output")
    p.add_argument("--json", action="store_true", help="the build report as JSON")
    p.set_defaults(func=run_compile)
