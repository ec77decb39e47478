"""Context length, KV cache type and RoPE flags of `apr run`, `apr chat`, `apr serve` and
`apr bench` (llama.cpp's names), read into
`apr_core.runtime.context_options.ContextOptions`.

    apr run qwen.gguf -f long.txt --ctx 65536 --kv-type q8_0 --rope-scaling yarn \\
        --rope-scale 2 --yarn-orig-ctx 32768
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Optional

from apr_core.model.kv_types import NAMES as KV_TYPES
from apr_core.runtime.context_options import SCALINGS, ContextOptions

FIELDS = tuple(f.name for f in dataclasses.fields(ContextOptions))   # flags' dest names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--ctx", "--ctx-size", dest="ctx", type=int, metavar="N",
                   help="context length in tokens (default: the model's trained context); "
                   "its KV memory grows with it")
    p.add_argument("--kv-type", "--cache-type", dest="kv_type", choices=KV_TYPES,
                   help="KV cache storage: f16 (default; half of f32), q8_0 (~1/4 of f32), "
                   "q4_0 (~1/7) or f32; --verbose shows its memory")
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


def kv_line(report: dict) -> str:
    """One line on the KV cache (`Engine.kv_report`): its type and memory."""
    return "KV cache {}: {:.1f} KiB per token, {:.1f} MiB for the {}-token context".format(
        report["kv_type"], report["bytes_per_token"] / 1024.0,
        report["context_bytes"] / 1048576.0, report["context"])


def report_kv(args: argparse.Namespace, engine) -> None:
    """`--verbose`: the KV cache line on stderr."""
    if getattr(args, "verbose", False):
        print("apr: " + kv_line(engine.kv_report()), file=sys.stderr)


__all__ = ["add_arguments", "options", "kv_line", "report_kv"]
