"""`apr qa MODEL`: the release checklist of a model file, one gate (exit 1 when any check
fails).

    apr qa demo
    apr qa model.gguf --min-tok-s 20 --max-rss-mb 1024 --json
    apr qa model.apr --trusted-key KEY.pub --skip logits

Checks (`qa/__init__.py` CHECKS): format, checksum, signature, load, tokenizer, golden,
logits (vs llama.cpp), perplexity, throughput, memory; each `pass`, `fail` or `skip` with
the reason. `--json` prints exactly `{"passed": bool, "checks": [{"name", "status",
"detail"}, ...]}`.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from apr_core.errors import AprError, ErrorCode

from .commands import help_line
from .common import EXIT_GENERAL, EXIT_OK, emit_json, quiet, resolve_model
from .render import console, print_table, wants_json


STATUS_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skip"}


def _trusted_key(path: str) -> bytes:
    from apr_core.crypto import keys
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return keys.parse_public(handle.read())
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read the trusted key file: {}".format(
            exc.strerror), path=path) from None


def options_from(args: argparse.Namespace):
    """The QaOptions the flags ask for."""
    from apr_core.formats.open import configured_trusted_key
    from .qa import QaOptions
    for flag, value in (("--max-ppl", args.max_ppl), ("--min-tok-s", args.min_tok_s),
                        ("--max-rss-mb", args.max_rss_mb)):
        if value is not None and not value > 0:
            raise AprError(ErrorCode.ARGUMENT, "{} must be a positive number".format(flag),
                           value=value)
    if not args.golden_expect:
        raise AprError(ErrorCode.ARGUMENT, "--golden-expect must not be empty")
    trusted = _trusted_key(args.trusted_key) if args.trusted_key else configured_trusted_key()
    return QaOptions(golden_prompt=args.golden_prompt, golden_expect=args.golden_expect,
                     golden_chat=args.golden_chat, max_ppl=args.max_ppl,
                     min_tok_s=args.min_tok_s, max_rss_mb=args.max_rss_mb,
                     skip=frozenset(args.skip or ()), trusted_key=trusted,
                     backend=args.backend, dequantize=args.dequantize)


def run_qa(args: argparse.Namespace) -> int:
    from .qa.runner import passed, run_checks
    options = options_from(args)
    path = resolve_model(args.model)
    if quiet():
        checks = run_checks(path, options)
    else:                                # a spinner on stderr naming the running check
        from rich.console import Console
        with Console(stderr=True).status("qa") as status:
            checks = run_checks(path, options,
                                lambda name: status.update("qa: {}".format(name)))
    ok = passed(checks)
    if wants_json(args):
        emit_json({"passed": ok, "checks": [check.to_dict() for check in checks]})
    else:
        print_table("apr qa {}".format(os.path.basename(os.path.normpath(path))),
                    ["check", "status", "detail"],
                    [(c.name, STATUS_MARK[c.status], c.detail) for c in checks])
        failed = [c.name for c in checks if c.status == "fail"]
        console().print("PASSED" if ok else "FAILED: {}".format(", ".join(failed)))
    if not ok:
        print("apr: qa failed: {}".format(", ".join(
            c.name for c in checks if c.status == "fail")), file=sys.stderr)
    return EXIT_OK if ok else EXIT_GENERAL


def register(sub: argparse._SubParsersAction) -> None:
    from .qa import CHECKS, DEFAULT_GOLDEN_EXPECT, DEFAULT_GOLDEN_PROMPT, DEFAULT_MAX_PPL
    from .run_cmd import add_runtime_arguments
    p = sub.add_parser(
        "qa", help=help_line("qa"), formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the release checklist on a model; exit 1 when a check fails.",
        epilog="checks:\n" + "\n".join(textwrap.fill(
            what, 88, initial_indent="  {:12s}".format(name), subsequent_indent=" " * 14)
            for name, what in CHECKS.items()))
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("--golden-prompt", default=DEFAULT_GOLDEN_PROMPT,
                   help="completed greedily, as given (default {!r})".format(
                       DEFAULT_GOLDEN_PROMPT))
    p.add_argument("--golden-expect", default=DEFAULT_GOLDEN_EXPECT,
                   help="text the golden answer must contain (default {!r})".format(
                       DEFAULT_GOLDEN_EXPECT))
    p.add_argument("--golden-chat", action="store_true",
                   help="send the golden prompt through the model's chat template")
    p.add_argument("--max-ppl", type=float, default=DEFAULT_MAX_PPL,
                   help="perplexity bound on the built-in text (default {:g})".format(
                       DEFAULT_MAX_PPL))
    p.add_argument("--min-tok-s", type=float,
                   help="decode throughput floor in tokens/s (default: report, skip)")
    p.add_argument("--max-rss-mb", type=float,
                   help="peak RSS ceiling in MiB while loaded and decoding "
                   "(default: report, skip)")
    p.add_argument("--trusted-key", metavar="KEY.pub",
                   help="the signature must be by this key (default: $APR_TRUSTED_KEY)")
    p.add_argument("--skip", action="append", choices=list(CHECKS), metavar="CHECK",
                   help="leave a check out (repeatable): " + ", ".join(CHECKS))
    add_runtime_arguments(p)
    p.add_argument("--json", action="store_true",
                   help='one object: {"passed": ..., "checks": [{"name", "status", '
                   '"detail"}, ...]}')
    p.set_defaults(func=run_qa)
