"""`apr eval MODEL --dataset TEXT_FILE`: perplexity, computed as llama.cpp's
`llama-perplexity` computes it (`apr_core.runtime.perplexity`: chunks of `--ctx` tokens, the
second half of each scored), so the two numbers can be compared.

Datasets are never downloaded: `--dataset` is a local text file (for WikiText-2, the
`wiki.test.raw` file that llama.cpp's scripts use). `--max-ppl` turns the number into a
gate (exit 5 above it).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

from apr_core.errors import AprError, ErrorCode

from .common import EXIT_OK, EXIT_VALIDATION, emit_json, quiet


def _read_text(path: str) -> str:
    if not os.path.isfile(path):
        raise AprError(ErrorCode.IO, "dataset is not a local text file (nothing is "
                       "downloaded: pass e.g. wikitext-2's wiki.test.raw)", dataset=path)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError as exc:
        raise AprError(ErrorCode.FORMAT, "dataset is not UTF-8 text", dataset=path,
                       reason=str(exc)[:80])


def run_eval(args: argparse.Namespace) -> int:
    from apr_core.runtime.perplexity import perplexity
    from .run_cmd import load
    text = _read_text(args.dataset)
    engine = load(args)
    model = engine.model
    tokenizer = model.tokenizer
    ids = tokenizer.encode(text, add_special=True, parse_special=False)
    show = not args.json and not quiet() and sys.stderr.isatty()

    def progress(done: int, total: int, running: float) -> None:
        if show:
            sys.stderr.write("\r[{}/{}] PPL {:.4f}".format(done, total, running))
            sys.stderr.flush()
    result = perplexity(model.transformer, ids, args.ctx,
                        bos_id=tokenizer.bos_id if tokenizer.add_bos else None,
                        max_chunks=args.chunks, on_chunk=progress)
    if show:
        sys.stderr.write("\n")
    result.update(model=args.model, dataset=args.dataset, backend=engine.backend)
    code = EXIT_OK
    if args.max_ppl is not None and not (math.isfinite(result["ppl"])
                                         and result["ppl"] <= args.max_ppl):
        code = EXIT_VALIDATION
    result["pass"] = code == EXIT_OK
    if args.json:
        emit_json(result)
    else:
        print("PPL = {:.4f} +/- {:.5f}  ({} tokens scored in {} chunks of {})".format(
            result["ppl"], result["ppl_stderr"], result["tokens_scored"], result["chunks"],
            result["n_ctx"]))
        if code != EXIT_OK:
            print("FAIL: PPL above --max-ppl {}".format(args.max_ppl), file=sys.stderr)
    return code


def register(sub: argparse._SubParsersAction) -> None:
    from .run_cmd import add_runtime_arguments
    p = sub.add_parser("eval", help="perplexity on a local text file, as llama-perplexity "
                       "computes it")
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors dir) or 'demo'")
    p.add_argument("--dataset", required=True, metavar="TEXT_FILE",
                   help="local UTF-8 text (e.g. wikitext-2 wiki.test.raw)")
    p.add_argument("--ctx", type=int, default=512, help="tokens per chunk (default 512)")
    p.add_argument("--chunks", type=int, help="score at most this many chunks")
    p.add_argument("--max-ppl", type=float, help="exit 5 when the perplexity is above this")
    add_runtime_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_eval)
