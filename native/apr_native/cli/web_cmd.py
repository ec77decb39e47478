"""`apr web MODEL_DIR`: serve the browser shell and a model directory from one origin.

The page (web/index.html) boots Pyodide in a Web Worker, streams the models' shards by HTTP
Range requests and caches them in IndexedDB; web/speech.html transcribes audio with a
Whisper APR file of MODEL_DIR (listed with kind "speech"). Everything is served locally:
the shell, the Pyodide distribution, an apr_core wheel built from this checkout and
MODEL_DIR at /models/. The page's URL box also takes hf://ORG/REPO[:QUANT|/FILE][@REV],
fetched from the Hub (--hf-endpoint) into the same verified cache.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from typing import Dict, List

from apr_core.errors import AprError, ErrorCode
from apr_core.refs import is_reference

from .common import emit_json, human_bytes


MODEL_SUFFIXES = (".apr", ".gguf", ".safetensors")
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.(apr|safetensors)\Z")


def list_models(directory: str) -> List[Dict[str, object]]:
    """Model files a page can open: single files and sharded manifests, not their shards;
    `kind` is "speech" for Whisper models (the speech page's), else "text"."""
    from apr_native.server.speech_engine import is_speech_model
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(MODEL_SUFFIXES) and not _SHARD.search(name) and os.path.isfile(path):
            found.append({"name": name, "url": "models/" + name, "size": os.path.getsize(path),
                          "kind": "speech" if is_speech_model(path) else "text"})
    return found


def run_web(args: argparse.Namespace) -> int:
    from apr_native.web_bundle import missing_runtime, prepare_site, site_mounts
    from apr_native.web_server import StaticServer
    directory = args.model_dir
    if is_reference(directory):          # hf://..., https://...: serve the fetched file's folder
        from .common import resolve_model
        fetched = resolve_model(directory)
        directory = fetched if os.path.isdir(fetched) else os.path.dirname(fetched)
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise AprError(ErrorCode.IO, "not a directory", path=args.model_dir)
    reason = missing_runtime(args.pyodide)
    if reason:
        raise AprError(ErrorCode.IO, reason)
    models = list_models(directory)
    site_dir = tempfile.mkdtemp(prefix="apr-web-")
    try:
        endpoint = args.hf_endpoint or os.environ.get("HF_ENDPOINT") or None
        prepare_site(site_dir, flavor=args.pyodide, models=models,
                     extra={"hfEndpoint": endpoint.rstrip("/")} if endpoint else None)
        try:
            server = StaticServer(site_mounts(site_dir, directory), host=args.host, port=args.port)
        except OSError as exc:
            raise AprError(ErrorCode.IO, "cannot listen on {}:{}: {}".format(
                args.host, args.port, exc.strerror or exc))
        url = server.url("/")
        if args.json:
            emit_json({"url": url, "speech_url": server.url("/speech.html"),
                       "models": models, "pyodide": args.pyodide,
                       "model_dir": directory, "hf_endpoint": endpoint})
        else:
            print("serving {} model(s) from {}".format(len(models), directory))
            for model in models:
                print("  {}  {}".format(model["url"], human_bytes(model["size"])))
            if any(model["kind"] == "speech" for model in models):
                print("speech to text: {}".format(server.url("/speech.html")))
            print("open {}  (Ctrl-C to stop)".format(url), flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    finally:
        shutil.rmtree(site_dir, ignore_errors=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("web", help="serve the browser demo and a model directory locally",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("model_dir", metavar="MODEL_DIR",
                   help="directory of models (.apr manifests, .gguf, .safetensors), or a "
                        "reference (hf://ORG/REPO..., https://...) to fetch and serve")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--pyodide", choices=["017", "314"], default="017",
                   help="Pyodide for the page: 017 ships numpy offline (chat works), 314 is "
                        "the official release (formats and caching; numpy from its CDN)")
    p.add_argument("--hf-endpoint", metavar="URL", default=None,
                   help="the Hub the page resolves hf://ORG/REPO... references against "
                        "(default: $HF_ENDPOINT, else https://huggingface.co)")
    p.add_argument("--json", action="store_true", help="print the URL and models as JSON")
    p.set_defaults(func=run_web)
