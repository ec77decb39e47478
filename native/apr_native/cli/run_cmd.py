"""`apr run` (one prompt) and `apr chat` (an interactive or piped conversation)."""
from __future__ import annotations

import argparse
import sys

from apr_core.runtime.sampling import SamplerConfig

from .. import backends
from ..engine import Engine, EngineOptions, load_engine
from . import chat_template_arg
from .common import emit_json

COMMANDS = {
    "run": "generate text from a prompt",
    "chat": "chat with a model (interactive, or one turn per stdin line)",
}


def sampler_from(args: argparse.Namespace) -> SamplerConfig:
    return SamplerConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                         min_p=args.min_p, repetition_penalty=args.repeat_penalty,
                         seed=args.seed)


def load(args: argparse.Namespace) -> Engine:
    """The engine for `args.model` with `--backend` / `--dequantize` (the same loader every
    command and the server use); `args.backend` becomes the backend it chose."""
    engine = load_engine(args.model, EngineOptions(
        backend=args.backend, dequantize=args.dequantize,
        chat_template=chat_template_arg.option(args)))
    chat_template_arg.check_run(args, engine.model)     # run/chat: a broken template, once
    args.backend = engine.backend
    args.load_seconds = engine.load_seconds
    return engine


def run_run(args: argparse.Namespace) -> int:
    engine = load(args)
    ids = engine.model.prompt_ids(args.prompt, chat=args.chat, system=args.system)
    sampler = sampler_from(args)
    if args.json:
        result = engine.generate(ids, sampler, args.max_tokens, args.stop or ()).as_dict()
        result["timings"]["load_s"] = round(args.load_seconds, 3)
        result["backend"] = args.backend
        emit_json(result)
        return 0
    for piece in engine.stream(ids, sampler, args.max_tokens, args.stop or ()):
        sys.stdout.write(piece.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def run_chat(args: argparse.Namespace) -> int:
    """Each input line is a user turn; the conversation history is kept across turns."""
    engine = load(args)
    model = engine.model
    interactive = sys.stdin.isatty()
    messages = [{"role": "system", "content": args.system}] if args.system else []
    sampler = sampler_from(args)
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        messages.append({"role": "user", "content": text})
        reply = []
        for piece in engine.stream(model.chat_ids(messages), sampler, args.max_tokens,
                                   args.stop or ()):
            reply.append(piece.text)
            sys.stdout.write(piece.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": "".join(reply)})
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("-n", "--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--system", help="system prompt (chat)")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    chat_template_arg.add_argument(p)
    add_runtime_arguments(p)


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """--dequantize and --backend, for every command that loads a model to run it."""
    p.add_argument("--dequantize", action="store_true",
                   help="dequantize weights to f32 at load (faster, more memory)")
    p.add_argument("--backend", choices=("auto",) + backends.NAMES,
                   help="kernel backend (default: $APR_BACKEND, else CUDA > numba > numpy)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate text from a prompt")
    _common(p)
    p.add_argument("prompt")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: text, token_ids, timings")
    p.set_defaults(func=run_run)
    p = sub.add_parser("chat", help="chat with a model (interactive, or one turn per stdin line)")
    _common(p)
    p.set_defaults(func=run_chat)
