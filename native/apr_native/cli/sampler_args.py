"""The sampler flags of `apr run` and `apr chat`, built from THE option table
(`apr_core/runtime/sampler_options.py`, which `apr serve` reads request fields from); a
value outside its range (`apr_core/runtime/option_ranges.py`) is refused as it is parsed,
with one E011 line naming the flag, the value and the range.

    apr run demo "Tell a story" --temperature 0.8 --top-p 0.95 --dry-multiplier 0.8 \\
        --xtc-probability 0.5 --logit-bias 2+5 --samplers "penalties;dry;top_k;xtc;temperature"
"""
from __future__ import annotations

import argparse

from apr_core.runtime.option_ranges import RANGES
from apr_core.runtime.sampler_options import OPTIONS, from_flags, parse_logit_bias
from apr_core.runtime.sampling import SamplerConfig

from .arg_parser import typed


def add_arguments(p: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        shown = option.default if not isinstance(option.default, tuple) else None
        allowed = RANGES.get(option.field)
        extra = {"action": "append"} if option.field == "dry_sequence_breakers" else \
            {"type": option.kind if option.kind is str else typed(option.kind, allowed)}
        p.add_argument(option.flag, dest="sampler_" + option.field, default=None,
                       metavar=option.field.split("_")[-1].upper() if option.kind is not str
                       else "S", help=option.help + (
                           "" if shown is None else " (default {}{})".format(
                               shown, "" if allowed is None else "; " + str(allowed))),
                       **extra)
    p.add_argument("--logit-bias", action="append", metavar="ID(+|-)BIAS",
                   help="add BIAS to token ID's logit, e.g. 15043+1 or 29871-inf (repeatable)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="keep generating past the end-of-turn token (to -n)")
    p.add_argument("--seed", type=int, help="the sampling seed (same seed, same text)")


def config(args: argparse.Namespace) -> SamplerConfig:
    """The SamplerConfig the flags ask for (greedy unless --temperature says otherwise)."""
    values = {o.field: getattr(args, "sampler_" + o.field) for o in OPTIONS}
    kwargs = from_flags(values)
    kwargs.setdefault("temperature", 0.0)
    return SamplerConfig(seed=args.seed, logit_bias=parse_logit_bias(args.logit_bias),
                         **kwargs)


__all__ = ["add_arguments", "config"]
