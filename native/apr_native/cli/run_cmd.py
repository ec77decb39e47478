"""`apr run` (one prompt) and `apr chat` (an interactive or piped conversation).

Both apply the model's chat template by default when it has one, as llama-cli, ollama and
mlx_lm do; `--raw` completes the text as given (`prompting.py` holds the rule)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from apr_core.runtime.option_ranges import RANGES

from .. import backends
from ..engine import Engine, EngineOptions, load_engine
from . import chat_session
from . import chat_template_arg
from . import context_args
from . import lora_args
from . import thread_args
from . import prompting
from . import sampler_args
from . import speculate_args
from . import transcribe_run
from .arg_parser import typed
from .commands import help_line
from .common import emit_json


def load(args: argparse.Namespace, quick_start: bool = False,
         model: Optional[str] = None) -> Engine:
    """The engine for `model` (default `args.model`) with `--backend` / `--dequantize` (the
    same loader every command and the server use); the backend it chose and its load time
    are the engine's (`engine.backend`, `engine.load_seconds`).
    `quick_start` (run, chat): a short prompt's first token on the simd kernels while
    numba's load waits for the first decode step (`backends.select`)."""
    engine = load_engine(args.model if model is None else model, EngineOptions(
        backend=args.backend, dequantize=args.dequantize,
        chat_template=chat_template_arg.option(args), context=context_args.options(args),
        lora=lora_args.specs(args)),
        quick_start=quick_start and not getattr(args, "draft", None))
    chat_template_arg.check_run(args, engine.model)     # run/chat: a broken template, once
    context_args.report_kv(args, engine)
    return engine


def run_run(args: argparse.Namespace) -> int:
    if args.input or transcribe_run.is_whisper_file(args.model):
        return transcribe_run.run_transcribe(args)      # a Whisper model: speech to text
    prompt = prompting.read_prompt(args)
    engine = load(args, quick_start=True)
    ids, template = prompting.prompt_ids(args, engine.model, prompt)
    sampler = sampler_args.config(args)
    spec = speculate_args.config(args, engine)
    if args.json:
        generation = engine.generate(ids, sampler, args.max_tokens, args.stop or (), spec,
                                     ignore_eos=args.ignore_eos)
        prompting.warn_if_empty(args, engine.model, template, len(generation.token_ids))
        speculate_args.report(args, generation.speculative)
        result = generation.as_dict()
        result["timings"]["load_s"] = round(engine.load_seconds, 3)
        result["backend"] = engine.backend      # simd: the quick start never needed numba
        result["threads"] = thread_args.in_use(engine.backend)
        result["template"] = template
        cfg = engine.transformer.config
        result["context"] = cfg.max_ctx
        result["rope_scaling"] = cfg.rope_scaling.kind if cfg.positions == "rope" else None
        result["kv_cache"] = engine.kv_report()
        emit_json(result)
        return 0
    generated = 0
    finished = []                  # the FinishEvent: its counters go out after the text
    pieces = engine.stream(ids, sampler, args.max_tokens, args.stop or (), spec,
                           finished.append, ignore_eos=args.ignore_eos)
    for piece in pieces:
        generated += piece.token_id >= 0
        sys.stdout.write(piece.text)
        sys.stdout.flush()
    sys.stdout.write("\n")         # also when -n cut the answer mid-line
    sys.stdout.flush()
    for event in finished:
        speculate_args.report(args, event.speculative)
    prompting.warn_if_empty(args, engine.model, template, generated)
    return 0


def run_chat(args: argparse.Namespace) -> int:
    """Each input line is a user turn; the conversation history is kept across turns.
    Without a chat template (or with --raw) the lines and replies are one plain text."""
    engine = load(args, quick_start=True)
    model = engine.model
    chat = prompting.uses_template(args, model)
    if not chat:
        print("apr: {}: each line continues one plain text".format(
            "--raw" if args.raw else "this model has no chat template (--chat for ChatML)"),
            file=sys.stderr)
    transcript = ""
    interactive = sys.stdin.isatty()
    messages = [{"role": "system", "content": args.system}] if args.system else []
    session = chat_session.ChatSession(args.session, engine) if args.session else None
    saved = session.resume("chat" if chat else "raw") if session else None
    if saved is not None:
        if args.system and messages != saved.get("messages", [])[:1]:
            print("apr: --system is ignored: the session goes on with its own system prompt",
                  file=sys.stderr)
        messages, transcript = list(saved.get("messages", [])), saved.get("transcript", "")
    sampler = sampler_args.config(args)
    spec = speculate_args.config(args, engine)
    turn = 0
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
        if chat:
            messages.append({"role": "user", "content": text})
            ids = model.chat_ids(messages)
        else:
            transcript += text + "\n"
            ids = model.prompt_ids(transcript)
        reply, finished, generated = [], [], []
        start, first = time.perf_counter(), None
        for piece in engine.stream(ids, sampler, args.max_tokens, args.stop or (), spec,
                                   finished.append, ignore_eos=args.ignore_eos):
            first = first or time.perf_counter()
            if piece.token_id >= 0:
                generated.append(piece.token_id)
            reply.append(piece.text)
            sys.stdout.write(piece.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
        turn += 1
        for event in finished:
            speculate_args.report(args, event.speculative)
            if args.verbose:
                print("apr: turn {}: {} prompt tokens, {} reused from the cache, first token "
                      "after {:.3f} s".format(turn, event.prompt_tokens, event.cached_tokens,
                                              (first or time.perf_counter()) - start),
                      file=sys.stderr)
        if chat:
            messages.append({"role": "assistant", "content": "".join(reply)})
        else:
            transcript += "".join(reply) + "\n"
        if session is not None:
            session.save(ids + generated, {"mode": "chat" if chat else "raw",
                                           "messages": messages, "transcript": transcript})
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("-n", "--max-tokens", type=typed(int, RANGES["max_tokens"]), default=128,
                   help="most tokens to generate (default 128; {})".format(
                       RANGES["max_tokens"]))
    sampler_args.add_arguments(p)
    p.add_argument("--system", help="system prompt (implies the chat template)")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    chat_template_arg.add_argument(p)
    add_runtime_arguments(p)
    speculate_args.add_arguments(p)
    context_args.add_arguments(p)
    lora_args.add_argument(p)


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """--dequantize, --backend and -t/--threads, for every command that loads a model to
    run it."""
    p.add_argument("--dequantize", action="store_true",
                   help="dequantize weights to f32 at load (faster, more memory)")
    p.add_argument("--backend", choices=("auto",) + backends.NAMES,
                   help="kernel backend (default: $APR_BACKEND, else CUDA > numba > numpy)")
    thread_args.add_argument(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help=help_line("run"), description=(
        "Generate text from a prompt. A chat model's prompt goes through its own chat "
        "template by default (as one user turn); --raw completes the text as given; a "
        "model without a template is always completed raw."))
    _common(p)
    p.add_argument("prompt", nargs="?", help="the prompt; '-' or none: read it from stdin")
    p.add_argument("-f", "--file", help="read the prompt from this file (as llama-cli -f)")
    prompting.add_template_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="one JSON object: text, token_ids, timings")
    transcribe_run.add_arguments(p)
    p.set_defaults(func=run_run)
    p = sub.add_parser("chat", help=help_line("chat"))
    _common(p)
    chat_session.add_argument(p)
    prompting.add_template_arguments(p)
    p.set_defaults(func=run_chat)
