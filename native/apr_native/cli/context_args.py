"""Context length and RoPE flags of `apr run`, `apr chat` and `apr serve` (llama.cpp's
names), read into `apr_core.runtime.context_options.ContextOptions`.

    apr run qwen.gguf -f long.txt --ctx 65536 --rope-scaling yarn --rope-scale 2 \\
        --yarn-orig-ctx 32768
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Optional

from apr_core.runtime.context_options import SCALINGS, ContextOptions

FIELDS = tuple(f.name for f in dataclasses.fields(ContextOptions))   # flags' dest names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--ctx", "--ctx-size", dest="ctx", type=int, metavar="N",
                   help="context length in tokens (default: the model's trained context); "
                   "its KV memory grows with it")
    p.add_argument("--rope-scaling", choices=SCALINGS,
                   help="RoPE scaling: none, linear or yarn (default: the model file's)")
    p.add_argument("--rope-scale", type=float, metavar="F",
                   help="RoPE scaling factor (the context is stretched F times)")
    p.add_argument("--rope-freq-base", type=float, metavar="THETA", help="RoPE base frequency")
    p.add_argument("--rope-freq-scale", type=float, metavar="S",
                   help="RoPE frequency scale, 1 / --rope-scale")
    p.add_argument("--yarn-orig-ctx", type=int, metavar="N",
                   help="YaRN: the context the model was trained on (default: the file's)")
    p.add_argument("--yarn-beta-fast", type=float, metavar="B",
                   help="YaRN: rotations above which a pair keeps its frequency (32)")
    p.add_argument("--yarn-beta-slow", type=float, metavar="B",
                   help="YaRN: rotations below which a pair is fully scaled (1)")
    p.add_argument("--yarn-attn-factor", type=float, metavar="A",
                   help="YaRN: cos/sin multiplier (default 0.1 ln(factor) + 1)")


def options(args: argparse.Namespace) -> Optional[ContextOptions]:
    """The ContextOptions the flags ask for, None when none is given (or the command has
    no such flags)."""
    found = ContextOptions(**{name: getattr(args, name, None) for name in FIELDS})
    return None if found.empty else found


__all__ = ["add_arguments", "options"]
