"""`--lora FILE[:SCALE]` (repeatable): LoRA adapters for run, chat, serve and export.

FILE is a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) or a
llama.cpp GGUF LoRA; SCALE (default 1.0) multiplies the adapter's alpha/r, as llama.cpp's
`--lora-scaled`. A path that itself contains ':' keeps it: only a number after the last
':' is read as the scale."""
from __future__ import annotations

import argparse
import math
from typing import Optional, Tuple

LoraSpec = Tuple[str, float]


def parse_spec(text: str) -> LoraSpec:
    """`FILE[:SCALE]` -> (FILE, SCALE); an argparse error (E011) for an empty path or a
    scale that is not a finite number."""
    path, colon, scale = text.rpartition(":")
    value = 1.0
    if not colon:
        path = text
    else:
        try:
            value = float(scale)
        except ValueError:
            path, value = text, 1.0          # a ':' inside the path, no scale given
        else:
            if not math.isfinite(value):
                raise argparse.ArgumentTypeError("{!r}: the scale must be a finite "
                                                 "number".format(text))
    if not path:
        raise argparse.ArgumentTypeError("{!r}: FILE[:SCALE] needs a file".format(text))
    return path, value


def add_argument(p: argparse.ArgumentParser, help_text: Optional[str] = None) -> None:
    p.add_argument("--lora", action="append", type=parse_spec, metavar="FILE[:SCALE]",
                   default=[], help=help_text or (
                       "apply a LoRA adapter at run time over the (quantized) weights: a "
                       "PEFT directory or a llama.cpp GGUF LoRA, SCALE default 1.0 "
                       "(repeatable: several adapters add up)"))


def specs(args: argparse.Namespace) -> Tuple[LoraSpec, ...]:
    """The `--lora` adapters of `args` (none when the command has no such option)."""
    return tuple(getattr(args, "lora", None) or ())


__all__ = ["parse_spec", "add_argument", "specs", "LoraSpec"]
