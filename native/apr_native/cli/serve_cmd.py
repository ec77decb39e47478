"""`apr serve MODEL`: the OpenAI-compatible HTTP server (native/apr_native/server).

    apr serve demo --port 8080 --max-batch 16 --kv-memory 1G
    curl localhost:8080/v1/chat/completions -d '{"model": "demo", "messages": [...]}'

Binds to 127.0.0.1 unless told otherwise; an API key (`--api-key` or APR_API_KEY) guards
/v1/* with `Authorization: Bearer KEY` and is what to use on any other address. The model
is loaded by the same `Engine` as `apr run` (backend, mmap); requests are decoded together
by continuous batching over a paged KV cache of `--kv-memory` bytes.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import Any

from apr_core.errors import AprError, ErrorCode

from .. import backends
from ..engine import DEFAULT_KV_MEMORY, EngineOptions
from . import chat_template_arg
from . import context_args
from . import speculate_args
from .common import parse_size, quiet, resolve_model

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def model_id_for(name: str) -> str:
    """The id clients pass as `model`: the built-in name, else the file's name."""
    return os.path.basename(os.path.normpath(name)) if os.path.exists(name) else name


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from apr_native.server.app import ServerSettings, create_app
    from apr_native.server.engine import ServingEngine
    from apr_native.server.speech_engine import is_speech_model
    if not 1 <= args.max_tokens <= 1 << 20 or args.max_queue < 1 or not 0 < args.port < 65536 \
            or not 1 <= args.max_batch <= 256:
        raise AprError(ErrorCode.ARGUMENT, "--max-tokens, --max-queue, --max-batch and --port "
                       "need positive values in range")
    kv_memory = parse_size(args.kv_memory)
    api_key = args.api_key or os.environ.get("APR_API_KEY") or None
    if not _is_loopback(args.host) and not api_key:
        print("apr: warning: serving on {} without --api-key: anyone who can reach it may "
              "use it".format(args.host), file=sys.stderr)
    path = resolve_model(args.model)
    settings = ServerSettings(api_key=api_key, max_tokens=args.max_tokens,
                              max_body=parse_size(args.max_body),
                              cors_origins=tuple(args.cors or ()))
    if is_speech_model(path):       # Whisper: OpenAI's audio routes (server/speech_app.py)
        return _serve_speech(args, path, settings)
    template = chat_template_arg.option(args)
    # A template that cannot render would fail every chat request: refuse to start.
    chat_template_arg.check_before_serving(path, template)
    options = EngineOptions(backend=args.backend, dequantize=args.dequantize,
                            max_batch=args.max_batch, kv_memory=kv_memory,
                            prefix_cache=not args.no_prefix_cache, chat_template=template,
                            context=context_args.options(args))
    # built on the engine thread once the model is loaded (a draft model loads there too)
    speculative = (lambda engine: speculate_args.config(args, engine)) \
        if args.speculate or args.draft else None
    engine = ServingEngine(path, args.model_id or model_id_for(args.model),
                           options, max_queue=args.max_queue, speculative=speculative)
    if not quiet():
        print("apr: serving '{}' on http://{}:{}/v1 (GET /ready answers 200 once the model "
              "is loaded)".format(engine.model_id, args.host, args.port), file=sys.stderr)
    uvicorn.run(create_app(engine, settings), host=args.host, port=args.port,
                log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


def _serve_speech(args: argparse.Namespace, path: str, settings: Any) -> int:
    """A Whisper model: transcriptions on one worker thread (server/speech_engine.py)."""
    import uvicorn

    from apr_native.server.speech_app import create_speech_app
    from apr_native.server.speech_engine import SpeechEngine
    engine = SpeechEngine(path, args.model_id or model_id_for(args.model),
                          max_queue=args.max_queue)
    if not quiet():
        print("apr: serving speech model '{}' on http://{}:{}/v1/audio/transcriptions (GET "
              "/ready answers 200 once the model is loaded)".format(
                  engine.model_id, args.host, args.port), file=sys.stderr)
    app = create_speech_app(engine, settings, max_upload=parse_size(args.max_upload))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=5)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (or APR_API_KEY)")
    p.add_argument("--model-id", help="name clients use as 'model' (default: the file name "
                   "or built-in name)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="cap on max_tokens per request (also the default)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests that may wait for admission before 429s")
    p.add_argument("--max-batch", type=int, default=16,
                   help="sequences decoded together (continuous batching)")
    p.add_argument("--kv-memory", default=str(DEFAULT_KV_MEMORY >> 20) + "M",
                   help="memory budget of the paged KV cache (e.g. 512M, 2G)")
    p.add_argument("--no-prefix-cache", action="store_true",
                   help="do not reuse the KV blocks of identical prompt prefixes")
    p.add_argument("--backend", choices=("auto",) + backends.NAMES,
                   help="kernel backend (default: $APR_BACKEND, else CUDA > numba > numpy)")
    p.add_argument("--cors", action="append", metavar="ORIGIN",
                   help="let web pages from ORIGIN call the API ('*' for any; repeatable)")
    p.add_argument("--max-body", default="4M", help="largest request body (e.g. 64K, 4M)")
    p.add_argument("--max-upload", default="25M",
                   help="largest audio upload of a speech model (POST /v1/audio/...)")
    p.add_argument("--dequantize", action="store_true",
                   help="dequantize weights to f32 at load (faster decode, more memory)")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS)
    chat_template_arg.add_argument(p)
    speculate_args.add_arguments(p, verbose=False)
    context_args.add_arguments(p)
    p.set_defaults(func=run_serve)
