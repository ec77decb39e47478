"""`apr serve MODEL`: the OpenAI-compatible HTTP server (native/apr_native/server).

    apr serve demo --port 8080 --max-batch 16 --kv-memory 1G
    curl localhost:8080/v1/chat/completions -d '{"model": "demo", "messages": [...]}'

Binds to 127.0.0.1 unless told otherwise; an API key (`--api-key` or APR_API_KEY) guards
/v1/* with `Authorization: Bearer KEY` and is what to use on any other address. The model
is loaded by the same `Engine` as `apr run` (backend, mmap); requests are decoded together
by continuous batching over a paged KV cache of `--kv-memory` bytes.

Sampling fields a request leaves out take the model's recommendation, else llama-server's
defaults; `--temp/--top-k/--top-p/--min-p/--repeat-penalty` (llama-server's flags)
override both (apr_core/runtime/sampling_defaults.py). The log on stderr names the
listening URL, the loaded model and each request (`--log-format text|json|off`,
server/server_log.py).
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from typing import Any, Dict, Optional, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.sampling_defaults import BUILT_IN_VALUES

from .. import backends
from ..engine import DEFAULT_KV_MEMORY, EngineOptions
from . import chat_template_arg
from . import context_args
from . import lora_args
from . import thread_args
from . import speculate_args
from .common import parse_size, resolve_model
from . import serve_models

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
LOG_FORMATS = ("text", "json", "off")           # server/server_log.py's FORMATS

# llama-server's flags for the sampling defaults: (flag, SamplerConfig field, type, help);
# their ranges are the request fields' (server/schemas.py SAMPLING_RANGES)
SAMPLING_FLAGS: Tuple[Tuple[str, str, type, str], ...] = (
    ("--temp", "temperature", float, "temperature"),
    ("--top-k", "top_k", int, "top-k (0 = off)"),
    ("--top-p", "top_p", float, "top-p (nucleus mass)"),
    ("--min-p", "min_p", float, "min-p (0 = off)"),
    ("--repeat-penalty", "repetition_penalty", float, "repeat penalty (1 = off)"),
)
# the integer options: dest -> (flag, lowest, highest)
LIMITS: Dict[str, Tuple[str, int, int]] = {
    "port": ("--port", 1, 65535), "max_tokens": ("--max-tokens", 1, 1 << 20),
    "max_queue": ("--max-queue", 1, 1 << 20), "max_batch": ("--max-batch", 1, 256)}


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


def _out_of_range(flag: str, value: Any, low: Any, high: Any) -> AprError:
    return AprError(ErrorCode.ARGUMENT, "{} {} is out of range: it takes {} to {}".format(
        flag, value, low, high))


def check_limits(args: argparse.Namespace) -> None:
    """E011 naming the flag, the value and its range for an integer option out of range."""
    for dest, (flag, low, high) in LIMITS.items():
        value = getattr(args, dest)
        if not low <= value <= high:
            raise _out_of_range(flag, value, low, high)


def sampling_flags(args: argparse.Namespace) -> Dict[str, Any]:
    """The sampling defaults the flags set (SamplerConfig field -> value), each checked
    against the range a request's field has (E011 naming flag, value and range)."""
    from apr_native.server.schemas import SAMPLING_RANGES
    out: Dict[str, Any] = {}
    for flag, field, _, _ in SAMPLING_FLAGS:
        value = getattr(args, "default_" + field)
        if value is None:
            continue
        low, high = SAMPLING_RANGES[field]
        if not low <= value <= high:
            raise _out_of_range(flag, value, low, high)
        out[field] = value
    return out


def table_sampling(name: str) -> Dict[str, Any]:
    """What apr's table of built-in models recommends for `name` (a built-in name; a path
    gets nothing from it)."""
    from apr_native import real_models
    model = real_models.MODELS.get(name)
    return dict(model.sampling) if model is not None and not os.path.exists(name) else {}


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a port in use is a coded error
    at once, and the start line names an address that really answers."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise AprError(ErrorCode.ARGUMENT, "--host {}: {}".format(host, err), value=host)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise AprError(ErrorCode.IO, "cannot listen on {}:{}: {} (another server there? "
                       "--port picks another)".format(host, port, err.strerror or err),
                       host=host, port=port)
    return sock


def url_of(host: str, port: int) -> str:
    return "http://{}:{}".format("[{}]".format(host) if ":" in host else host, port)


def _uvicorn(app: Any, args: argparse.Namespace, sock: socket.socket) -> int:
    """uvicorn on the bound socket; its access log is off (ServerLog writes one line per
    request instead)."""
    import uvicorn
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False,
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _slot_folder(path: Optional[str], lora: bool) -> Optional[str]:
    """--slot-save-path: the folder (created when missing), E007 when it cannot be; E011
    next to --lora (a session names its model by the file alone: kv_session.require_plain)."""
    if not path:
        return None
    if lora:
        raise AprError(ErrorCode.ARGUMENT, "--slot-save-path cannot be used with --lora: "
                       "slot files name the model file alone, not its adapters")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise AprError(ErrorCode.IO, "cannot create the slot save folder", path=path,
                       error=err.strerror or str(err))
    return path


def run_serve(args: argparse.Namespace) -> int:
    from apr_native.server.app import ServerSettings, create_app
    from apr_native.server.server_log import ServerLog
    from apr_native.server.speech_engine import is_speech_model
    check_limits(args)
    sampling_flags(args)        # flag values out of range: refused before anything loads
    parse_size(args.kv_memory)
    log = ServerLog(args.log_format)
    api_key = args.api_key or os.environ.get("APR_API_KEY") or None
    if not _is_loopback(args.host) and not api_key:
        log.warning("serving on {} without --api-key: anyone who can reach it may use "
                    "it".format(args.host))
    settings = ServerSettings(api_key=api_key, max_tokens=args.max_tokens,
                              max_body=parse_size(args.max_body),
                              cors_origins=tuple(args.cors or ()),
                              slot_save_path=_slot_folder(args.slot_save_path,
                                                          bool(lora_args.specs(args))))
    names = list(args.model or ())
    if args.models_dir or len(names) != 1:      # many models: server/model_router.py
        return serve_models.run(args, names, settings, log,
                                lambda ref, mid: serving_engine(args, ref, mid, log),
                                model_id_for, lambda app, ids: _serve_router(args, app, ids,
                                                                            log))
    args.model = names[0]
    path = resolve_model(args.model)
    if is_speech_model(path):       # Whisper: OpenAI's audio routes (server/speech_app.py)
        return _serve_speech(args, path, settings, log)
    engine = serving_engine(args, args.model, args.model_id or model_id_for(args.model), log,
                            path)
    sock = listen_socket(args.host, args.port)
    log.listening(url_of(args.host, args.port), engine.model_id,
                  "; the API is under /v1, GET /ready answers 200 once it is loaded")
    return _uvicorn(create_app(engine, settings), args, sock)


def _serve_router(args: argparse.Namespace, app: Any, ids: str, log: Any) -> int:
    sock = listen_socket(args.host, args.port)
    log.listening(url_of(args.host, args.port), ids,
                  "; models load on first use (GET /v1/models shows their state)")
    return _uvicorn(app, args, sock)


def serving_engine(args: argparse.Namespace, name: str, model_id: str, log: Any,
                   path: Optional[str] = None) -> Any:
    """The `ServingEngine` (not started) of model `name` with the serve flags; `path`: the
    file `name` resolved to (resolved here when not given)."""
    from apr_native.server.engine import ServingEngine
    path = path or resolve_model(name)
    template = chat_template_arg.option(args)
    # A template that cannot render would fail every chat request: refuse to start.
    chat_template_arg.check_before_serving(path, template)
    options = EngineOptions(backend=args.backend, dequantize=args.dequantize,
                            max_batch=args.max_batch, kv_memory=parse_size(args.kv_memory),
                            # a cached prefix's K/V depend on the request's LoRA scales
                            prefix_cache=not args.no_prefix_cache and not lora_args.specs(args),
                            chat_template=template, context=context_args.options(args),
                            lora=lora_args.specs(args))
    # built on the engine thread once the model is loaded (a draft model loads there too)
    speculative = (lambda engine: speculate_args.config(args, engine)) \
        if args.speculate or args.draft else None
    return ServingEngine(path, model_id, options, max_queue=args.max_queue,
                         speculative=speculative, sampling_flags=sampling_flags(args),
                         table_sampling=table_sampling(name), log=log)


def _serve_speech(args: argparse.Namespace, path: str, settings: Any, log: Any) -> int:
    """A Whisper model: transcriptions on one worker thread (server/speech_engine.py)."""
    from apr_native.server.speech_app import create_speech_app
    from apr_native.server.speech_engine import SpeechEngine
    engine = SpeechEngine(path, args.model_id or model_id_for(args.model),
                          max_queue=args.max_queue, log=log)
    sock = listen_socket(args.host, args.port)
    log.listening(url_of(args.host, args.port), engine.model_id,
                  "; POST /v1/audio/transcriptions, GET /ready answers 200 once it is "
                  "loaded")
    app = create_speech_app(engine, settings, max_upload=parse_size(args.max_upload))
    return _uvicorn(app, args, sock)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, as argparse's
    ArgumentDefaultsHelpFormatter does, except where the text already names it; an unset
    default reads "not set" (the help says what then happens) and a flag's "off"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS \
                or "default" in text:
            return text
        shown = "not set" if action.default is None else \
            "off" if action.default is False else "%(default)s"
        return "{} (default: {})".format(text, shown)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("model", nargs="*", help="model file (.gguf, .apr, .safetensors dir), "
                   "reference (hf://...) or 'demo'; several: one server routing by the "
                   "request's 'model' (the file names, as GET /v1/models lists them)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (anything but loopback wants --api-key)")
    p.add_argument("--port", type=int, default=8080, help="TCP port to listen on")
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/*, /props "
                   "and /metrics (default: $APR_API_KEY, else no key)")
    p.add_argument("--model-id", help="name clients use as 'model' (default: the file name "
                   "or built-in name)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="cap on max_tokens per request, and what a request without one "
                   "gets")
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
    thread_args.add_argument(p)
    p.add_argument("--cors", action="append", metavar="ORIGIN",
                   help="let web pages from ORIGIN call the API ('*' for any; repeatable; "
                   "default: no origin)")
    p.add_argument("--max-body", default="4M", help="largest request body (e.g. 64K, 4M)")
    p.add_argument("--slot-save-path", metavar="DIR",
                   help="enable POST /slots/{id}?action=save|restore|erase (llama-server's): "
                   "session files of a slot's conversation and KV cache go to DIR")
    serve_models.add_arguments(p)
    p.add_argument("--max-upload", default="25M",
                   help="largest audio upload of a speech model (POST /v1/audio/...)")
    p.add_argument("--dequantize", action="store_true",
                   help="dequantize weights to f32 at load (faster decode, more memory)")
    for flag, field, kind, what in SAMPLING_FLAGS:
        p.add_argument(flag, dest="default_" + field, type=kind,
                       metavar=field.split("_")[-1].upper(),
                       help="{} for requests that send none (default: the model's "
                       "recommendation, else {})".format(what, BUILT_IN_VALUES[field]))
    p.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                   help="the log on stderr (start, model load, one line per request): "
                   "text, json (one object per line) or off")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS,
                   help="level of uvicorn's own messages")
    chat_template_arg.add_argument(p)
    speculate_args.add_arguments(p, verbose=False)
    context_args.add_arguments(p)
    lora_args.add_argument(p, "load a LoRA adapter (PEFT directory or GGUF LoRA) at SCALE "
                           "(default 1.0; repeatable); a request's \"lora\": [{\"id\": N, "
                           "\"scale\": S}] picks among them (unlisted ones: 0), as "
                           "llama-server's; GET /lora-adapters lists them. Turns the prefix "
                           "cache off")
    p.set_defaults(func=run_serve)
