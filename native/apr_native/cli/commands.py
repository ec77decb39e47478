"""THE table of `apr` commands: name -> module, group and one-line help, in the order
`apr --help` lists them.

    entry = find("ls")          # Command(name="list", module="cache_cmd", ...)
    importlib.import_module("apr_native.cli." + entry.module).register(subparsers)

Only the module of the command being run is imported, so `apr --help` (which reads this
table alone) imports no command module. Each module's `register(subparsers)` adds exactly
the commands listed here for it, under the same names, aliases and help lines
(tests/cli/test_cli_entry.py holds the two equal).
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple


class Command(NamedTuple):
    name: str
    module: Optional[str]       # `*_cmd` module of this package; None: main.py answers it
    help: str
    aliases: Tuple[str, ...] = ()


class Group(NamedTuple):
    title: str
    commands: Tuple[Command, ...]


GROUPS: Tuple[Group, ...] = (
    Group("models", (
        Command("pull", "pull_cmd",
                "download a model by reference (hf://, https://) into the cache, verified"),
        Command("list", "cache_cmd", "list the built-in, pulled and cached models",
                ("ls",)),
        Command("rm", "cache_cmd", "remove a cached model", ("remove",)),
        Command("cache", "cache_cmd",
                "the cache: info (directories, sizes), clear (pulled models, downloads)"),
    )),
    Group("inspect", (
        Command("inspect", "inspect_cmd", "show a model file's header, metadata and tensor "
                "summary (reads the header and index only)"),
        Command("tensors", "inspect_cmd",
                "list tensors: name, dtype, shape, size; --stats / --hist decode them"),
        Command("tree", "tree_cmd", "architecture tree from the tensor names"),
        Command("debug", "debug_cmd", "what a file is, in plain words (--drama: as a play); "
                "--hex / --strings for raw bytes"),
        Command("hex", "debug_cmd", "hex dump of a tensor's bytes (--tensor) or of the file"),
        Command("diff", "diff_cmd", "compare two models tensor by tensor (any formats)"),
        Command("trace", "trace_cmd", "follow a prompt through the model layer by layer: "
                "statistics, timing, anomalies, a diff against another model"),
        Command("tui", "tui_cmd", "terminal UI: graph, stats, histogram, compare and chat views"),
        Command("explain", "explain_cmd",
                "explain an error code, a model's architecture or a tensor"),
    )),
    Group("check", (
        Command("validate", "validate_cmd", "verify checksums and structure, decode every "
                "tensor; optional NaN/zero/shape/statistics checks and a 100-point score"),
        Command("lint", "lint_cmd",
                "check naming, metadata, alignment and compression conventions"),
        Command("oracle", "oracle_cmd", "check a model against its family contract"),
        Command("canary", "canary_cmd", "regression canaries: tensor statistics snapshots"),
        Command("eval", "eval_cmd",
                "perplexity on a local text file, as llama-perplexity computes it"),
    )),
    Group("convert", (
        Command("import", "import_cmd", "import SafeTensors, GGUF or PyTorch into APR"),
        Command("convert", "convert_cmd", "convert between APR, GGUF and SafeTensors"),
        Command("export", "export_cmd", "export a model to SafeTensors, GGUF or whisper.cpp"),
        Command("quantize", "quantize_cmd",
                "quantize a model (plain type or llama.cpp file type)"),
        Command("merge", "merge_cmd", "merge models: average, weighted, ties, dare, slerp"),
        Command("rosetta", "rosetta_cmd", "universal format conversion and verification"),
    )),
    Group("run/serve", (
        Command("run", "run_cmd", "generate text from a prompt"),
        Command("chat", "run_cmd",
                "chat with a model (interactive, or one turn per stdin line)"),
        Command("serve", "serve_cmd", "serve a model over an OpenAI-compatible HTTP API"),
        Command("bench", "bench_cmd", "prefill/decode speed, TTFT, load time and peak RSS, "
                "optionally against llama.cpp and torch"),
        Command("profile", "profile_cmd", "time per op kind and layer over a prefill and a "
                "decode, bytes, FLOPs and a roofline verdict per op, a Chrome trace"),
    )),
    Group("trust", (
        Command("keygen", "trust_cmd", "create a key pair for signing and receiving "
                "encrypted models (KEY and KEY.pub)"),
        Command("sign", "trust_cmd", "sign an APR file with an Ed25519 key"),
        Command("verify", "trust_cmd", "check an APR file's signature (E006 when invalid)"),
        Command("encrypt", "trust_cmd", "encrypt an APR file's tensors (AES-256-GCM) for a "
                "password (Argon2id) or a recipient's public key (X25519)"),
        Command("decrypt", "trust_cmd", "decrypt an encrypted APR file (E005 on a wrong "
                "password or key; nothing is written then)"),
    )),
    Group("ship", (
        Command("qa", "qa_cmd", "the release checklist: validation, signature, tokenizer, "
                "golden answer, llama.cpp logits, perplexity, speed and memory gates"),
        Command("compile", "compile_cmd", "pack a model and apr_core into one program: a "
                "Python zipapp (--target pyz) that runs with only numpy, or a static web "
                "site (--target web)"),
        Command("web", "web_cmd", "serve the browser demo and a model directory locally"),
        Command("lock", "project_cmd",
                "pin apr.toml's models in apr.lock (--check: exit 5 when it changed)"),
        Command("tasks", "project_cmd", "list the tasks of apr.toml"),
        Command("task", "project_cmd", "run a task of apr.toml"),
    )),
    Group("help", (
        Command("version", "version_cmd",
                "versions, kernel backend and CPU/GPU features (for bug reports)"),
        Command("help", None, "show the help of a command: apr help COMMAND"),
    )),
)

COMMANDS: Dict[str, Command] = {c.name: c for group in GROUPS for c in group.commands}
# every name a command answers to, aliases included
NAMES: Dict[str, Command] = dict(COMMANDS, **{alias: c for c in COMMANDS.values()
                                             for alias in c.aliases})


def find(name: str) -> Optional[Command]:
    """The command `name` (or an alias of it) means, or None."""
    return NAMES.get(name)


def help_line(name: str) -> str:
    """The one-line help of command `name`, for its module's `register`."""
    return COMMANDS[name].help


def modules() -> List[str]:
    """Every module that registers commands, in table order, once each."""
    return list(dict.fromkeys(c.module for c in COMMANDS.values() if c.module))


__all__ = ["Command", "Group", "GROUPS", "COMMANDS", "NAMES", "find", "help_line", "modules"]
