"""Speculative decoding flags of `apr run` and `apr chat`.

    apr run qwen2.5-coder-0.5b -f edit.txt --speculate lookup --draft-max 8 --verbose
    apr run big.gguf "Hi" --draft small.gguf          # a draft model, same tokenizer

`--speculate lookup` drafts from the prompt and the text so far; `--draft MODEL` from a
small model. Either way the target model verifies every draft token in one multi-row
pass (`apr_core/runtime/speculative.py`): greedy ids are those of plain decoding, sampled
text has plain sampling's distribution. `--verbose` prints the acceptance rate and tokens
per forward pass to stderr; `--json` carries them under "speculative".
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.speculative import SpeculativeConfig

from ..numba_rows import DOT_MAX_TOKENS

# checks that a draft model splits text as the target does
_PROBE_TEXT = "def f(x):\n    return x * 2  # Hello, world! 123 éü 你好"


def add_arguments(p: argparse.ArgumentParser, verbose: bool = True) -> None:
    p.add_argument("--speculate", choices=("lookup",),
                   help="speculative decoding with drafts from the prompt and the text so far "
                   "(prompt lookup); same output, faster when the answer repeats its input")
    p.add_argument("--draft", metavar="MODEL",
                   help="speculative decoding with a small draft model that has the same "
                   "tokenizer")
    p.add_argument("--draft-max", type=int, default=16, metavar="K",
                   help="most tokens drafted per step (default 16; the numba backend verifies "
                   "at most {} per pass, {} rows with the pending token, so that its rows "
                   "compute as decoding does)".format(DOT_MAX_TOKENS - 1, DOT_MAX_TOKENS))
    p.add_argument("--draft-min", type=int, default=0, metavar="N",
                   help="drop drafts shorter than N tokens (default 0)")
    if verbose:
        p.add_argument("--verbose", action="store_true",
                       help="print speculative decoding counters (acceptance, tokens per "
                       "pass) to stderr")


def config(args: argparse.Namespace, engine: Any) -> Optional[SpeculativeConfig]:
    """The SpeculativeConfig the flags ask for (None: plain decoding); `--draft` loads
    the draft model on the target's backend and checks it shares the tokenizer."""
    if args.speculate and args.draft:
        raise AprError(ErrorCode.ARGUMENT, "--speculate lookup and --draft MODEL exclude each "
                       "other")
    if args.draft:
        from ..engine import EngineOptions, load_engine
        draft = load_engine(args.draft, EngineOptions(backend=engine.backend,
                                                      dequantize=args.dequantize))
        check_same_tokenizer(engine.model, draft.model, args.draft)
        return SpeculativeConfig("draft", args.draft_max, args.draft_min,
                                 draft_model=draft.transformer)
    if args.speculate:
        return SpeculativeConfig(args.speculate, args.draft_max, args.draft_min)
    return None


def check_same_tokenizer(target: Any, draft: Any, name: str) -> None:
    """AprError(ARGUMENT) unless `draft` (a TextModel) tokenizes as `target` does and has
    its vocabulary size: draft ids must mean the target's tokens."""
    t_cfg, d_cfg = target.transformer.config, draft.transformer.config
    same = t_cfg.n_vocab == d_cfg.n_vocab and target.tokenizer.encode(
        _PROBE_TEXT, add_special=False, parse_special=False) == draft.tokenizer.encode(
        _PROBE_TEXT, add_special=False, parse_special=False) and \
        target.tokenizer.eog_ids == draft.tokenizer.eog_ids
    if not same:
        raise AprError(ErrorCode.ARGUMENT, "the draft model's tokenizer differs from the "
                       "target's", draft=name, draft_vocab=d_cfg.n_vocab,
                       target_vocab=t_cfg.n_vocab)


def report(args: argparse.Namespace, counters: Optional[Dict[str, Any]]) -> None:
    """`--verbose`: one line of speculative counters on stderr."""
    if not getattr(args, "verbose", False) or counters is None:
        return
    rate = counters["acceptance_rate"]
    print("apr: speculative ({}): {} drafted, {} accepted ({}), {} tokens in {} decode "
          "passes = {} tokens/pass".format(
              counters["mode"], counters["drafted_tokens"], counters["accepted_tokens"],
              "-" if rate is None else "{:.1%}".format(rate), counters["decoded_tokens"],
              counters["decode_passes"], counters["tokens_per_pass"]), file=sys.stderr)


__all__ = ["add_arguments", "config", "check_same_tokenizer", "report"]
