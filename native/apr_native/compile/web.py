"""`apr compile MODEL --target web -o DIR`: a static web site that chats with MODEL in the
browser, served by any plain static file server (no special headers, no apr process).

    report = build(path, "site/")                          # shards of at most 64 MiB
    report = build(path, "site/", quantize="Q4_K_M", max_shard=32 << 20)
    # then:  python -m http.server -d site/   and open http://localhost:8000/

The folder holds the page and shell of `apr web` (web/), the Pyodide 0.17 files that boot
Python with numpy, an apr_core wheel, and the model as a sharded APR v2 manifest with its
shards (see web_assets for the layout). `site/config.json` names the bundled model with
`autoload`, so the page loads it on open; the shell caches the shards in IndexedDB under
their sha256, so a second visit reads them without the network. Shards are read whole,
which servers without Range support (python -m http.server) answer too; `max_shard` keeps
every shard under GitHub Pages' 100 MB file limit.

The folder is built beside the output and renamed into place when complete.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Callable, Dict, List, Optional, Tuple

from apr_core.errors import AprError, ErrorCode

from ..cli.common import human_bytes
from ..cli.render import print_table
from ..web_bundle import PYODIDE_DIRS, missing_runtime, prepare_site, web_root
from .pyz import check_model
from .web_assets import (MARKER_KEY, RUNTIME_DIR, RUNTIME_FLAVOR, check_replaceable,
                         copy_runtime, copy_shell, make_readable, move_into_place, site_files,
                         staging_dir)

# the command-line options (argparse dests) this target takes beside the common ones
OPTIONS = ("quantize", "max_shard", "compress")
DEFAULT_MAX_SHARD = 64 << 20
PAGES_FILE_LIMIT = 100 * 1000 * 1000      # GitHub Pages refuses files over 100 MB
MODELS_DIR = "models"
_QUANT_SUFFIX = re.compile(r"[.-](I?Q\d\w*|[BF]F?16|F32)\Z", re.I)   # `-Q4_K_M`, `.f16` ...
Progress = Callable[[int, int], None]      # (bytes done, bytes in all)


def site_name(path: str, quantize: Optional[str] = None) -> str:
    """The model's file name in the site: its own, without extension, URL-safe; with
    `quantize`, the new type replaces a type named at its end (`m.Q4_1` -> `m.q4_0`)."""
    stem = os.path.basename(os.path.normpath(path))
    for suffix in (".gguf", ".apr", ".safetensors", ".index.json"):
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
    if quantize:
        stem = _QUANT_SUFFIX.sub("", stem) + "." + quantize
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-") or "model"


def build(model_path: str, output: str, external: Optional[str] = None,
          overwrite: bool = False, progress: Optional[Progress] = None,
          quantize: Optional[str] = None, max_shard: Optional[int] = None,
          compress: Optional[str] = None) -> Dict[str, Any]:
    """Write the site for `model_path` into the folder `output`. `quantize`: a type or
    llama.cpp file type (as `apr quantize`); `max_shard`: bytes per shard at most;
    `compress`: lz4 or zstd for the shards' payloads. `progress(done, total)` follows the
    model's tensors. Returns the model entry, the size of each part and of the whole."""
    if external is not None:
        raise AprError(ErrorCode.UNSUPPORTED, "--external is for --target pyz: a web site "
                       "carries its model's shards")
    max_shard = DEFAULT_MAX_SHARD if max_shard is None else max_shard
    if max_shard <= 0:
        raise AprError(ErrorCode.ARGUMENT, "--max-shard must be a positive size", value=max_shard)
    reason = missing_runtime(RUNTIME_FLAVOR)
    if reason:
        raise AprError(ErrorCode.IO, reason)
    check_replaceable(output, overwrite)
    source = check_model(model_path, embed=False)      # a tokenizer, else E010
    staging = staging_dir(output)
    try:
        model = _write_model(model_path, staging, site_name(model_path, quantize), quantize,
                             max_shard, compress, progress)
        model["source"] = source
        root = web_root()
        copy_shell(root, staging)
        copy_runtime(os.path.join(root, PYODIDE_DIRS[RUNTIME_FLAVOR]), staging)
        _write_config(os.path.join(staging, "site"), model)
        open(os.path.join(staging, ".nojekyll"), "wb").close()   # GitHub Pages: files as they are
        make_readable(staging)
        files = list(site_files(staging))
        move_into_place(staging, output, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _report(output, model, files)


def _write_model(path: str, site: str, name: str, quantize: Optional[str], max_shard: int,
                 compress: Optional[str], progress: Optional[Progress]) -> Dict[str, Any]:
    """Convert the model into `site`/models/NAME.apr (a manifest) and its shards, as
    `apr convert --shard-size` / `apr quantize` do; the manifest's entry for the report."""
    from apr_core.conversion.convert import convert
    from apr_core.conversion.quality import QualityReport
    from apr_core.formats.open import open_model
    from apr_core.runtime.text_model import tokenizer_for
    folder = os.path.join(site, MODELS_DIR)
    os.makedirs(folder)
    manifest = os.path.join(folder, name + ".apr")
    with open_model(path, verify=False) as original:
        sizes = {tensor: info.nbytes for tensor, info in original.tensors.items()}
    total, done = sum(sizes.values()), [0]

    def step(tensor: str, index: int, count: int) -> None:
        done[0] += sizes.get(tensor, 0)
        progress(done[0], total)            # type: ignore[misc]  # only set with progress

    quality = QualityReport()
    convert(path, manifest, "apr", compression=compress, max_shard_size=max_shard,
            quantize=quantize, report=quality, progress=step if progress else None)
    with open_model(manifest) as written:
        tokenizer_for(written, manifest)         # the page finds the tokenizer in the manifest
        meta = written.metadata
        shards = [{"file": MODELS_DIR + "/" + e["file"], "size": e["size"],
                   "sha256": e["sha256"]} for e in meta["shards"]]
    return {"name": name, "url": MODELS_DIR + "/" + name + ".apr",
            "manifest_size": os.path.getsize(manifest), "shards": shards,
            "quantize": quantize, "compression": compress, "max_shard": max_shard,
            "quality": quality.totals() if quantize else None}


def _write_config(site_dir: str, model: Dict[str, Any]) -> None:
    """site/config.json (web_bundle.prepare_site) naming the bundled model, loaded on
    open; only the wheels of the runtime this site ships are kept."""
    from apr_native import __version__
    size = model["manifest_size"] + sum(s["size"] for s in model["shards"])
    prepare_site(site_dir, flavor=RUNTIME_FLAVOR,
                 models=[{"name": model["name"], "url": model["url"], "size": size}],
                 extra={"defaultModel": model["url"], "autoload": True,
                        MARKER_KEY: {"target": "web", "apr_version": __version__,
                                     "model": model["url"]}})
    path = os.path.join(site_dir, "config.json")
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    for flavor, wheels in list(config["extraWheels"].items()):
        if flavor != RUNTIME_FLAVOR:                # the page boots only this flavor
            for wheel in wheels:
                os.unlink(os.path.join(site_dir, os.path.basename(wheel)))
            del config["extraWheels"][flavor]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)


def _part_of(path: str, model: Dict[str, Any]) -> str:
    """Which part of the report a site file belongs to."""
    if path == model["url"]:
        return "model manifest " + path
    if path.startswith(MODELS_DIR + "/"):
        return "shard " + path
    for prefix, part in ((RUNTIME_DIR + "/", "Pyodide 0.17 + numpy (" + RUNTIME_DIR + "/)"),
                         ("site/", "apr_core wheel + config (site/)")):
        if path.startswith(prefix):
            return part
    return "page: index.html, src/ (JS, CSS, Python glue)"


def _report(output: str, model: Dict[str, Any], files: List[Tuple[str, int]]) -> Dict[str, Any]:
    parts: Dict[str, Dict[str, Any]] = {}
    for path, size in files:
        part = parts.setdefault(_part_of(path, model), {"files": 0, "size": 0})
        part["files"] += 1
        part["size"] += size
    order = sorted(parts, key=lambda p: (p.startswith(("model", "shard")), p))
    largest = max(files, key=lambda f: f[1])
    return {"output": output, "target": "web", "model": model,
            "parts": [dict(part=p, **parts[p]) for p in order],
            "files": len(files), "size": sum(size for _, size in files),
            "largest": {"path": largest[0], "size": largest[1]},
            "over_pages_limit": [p for p, size in files if size > PAGES_FILE_LIMIT],
            "serve": "python -m http.server -d {}".format(output)}


def print_report(report: Dict[str, Any]) -> None:
    """The size of each part, the total, and how to serve the folder."""
    rows = [(p["part"], p["files"], human_bytes(p["size"])) for p in report["parts"]]
    rows.append(("total", report["files"], human_bytes(report["size"])))
    print_table("wrote {}".format(report["output"]), ["part", "files", "size"], rows,
                right=["files", "size"])
    quality = report["model"]["quality"]
    if quality:
        print("quantized to {}: {} tensors, min cosine {:.6f}".format(
            report["model"]["quantize"], quality["tensors"], quality["min_cosine"]))
    largest = report["largest"]
    print("largest file: {} ({})".format(largest["path"], human_bytes(largest["size"])))
    if report["over_pages_limit"]:
        print("warning: over GitHub Pages' 100 MB file limit: {} (use a smaller "
              "--max-shard)".format(", ".join(report["over_pages_limit"])))
    print("serve it: {}   then open http://localhost:8000/".format(report["serve"]))


__all__ = ["build", "print_report", "site_name", "OPTIONS", "DEFAULT_MAX_SHARD"]
