"""Whisper's projection weights over their stored bytes, as the text models hold theirs.

`load_whisper(..., kernels=k)` keeps every block-quantized projection weight -- the fused
self-attention q|k|v, the cross-attention query and k|v, the outputs, the MLP, and the
token embedding (the embedding lookup and the logits product) -- at its stored size as an
`apr_core.model.weights.Linear`. Decoder projections and the logits run on `kernels`, the
backend's "matmul" kernels (numba's integer block dots for a decoder step's 1..5 rows;
numpy's where the backend has none). Projections over a window's 1500 audio frames (the
encoder's, and the cross-attention k|v computed once per window) run on numpy's kernel:
float32 BLAS over rows decoded a 4 MiB block at a time, about 2x the block kernels'
dequantized tiles on 1500 x 512 x 2048 (71 vs 32 GFLOP/s, one thread), and only BLAS's
threads busy while the encoder runs (two pools taking turns on two cores each spin while
the other works). Plain-typed weights (F16, F32, CTranslate2 int8 with
row scales) stay float32 arrays: no native backend has a block kernel for them, and float32
BLAS is their fastest product.

The browser (web/src/apr_webspeech.py) passes `audio` (the shell's float32 SIMD kernel,
each weight widened once into the kernels' own memory: Pyodide's numpy has no BLAS) and
`plain=True`: F16 / BF16 projections are Linears as well, so the stored bytes are all the
Python heap holds of every projection.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ..quant import dequantize
from ..quant.registry import NUMPY, Kernels

WEIGHT = ".weight"
BIAS = ".bias"
SCALE_SUFFIX = "_scale"


PLAIN = ("F16", "BF16")   # the plain types `plain=True` holds as Linears too


def in_place(name: str, info: Any, names: Any, plain: bool = False) -> bool:
    """Whether tensor `name` (its TensorInfo `info`) runs as a Linear over its bytes: a
    2-D block-quantized (`plain`: or F16 / BF16) `*.weight` without CTranslate2 row
    scales."""
    typed = info.dtype.quantized or (plain and info.dtype.name in PLAIN)
    return (name.endswith(WEIGHT) and len(info.shape) == 2 and typed
            and name + SCALE_SUFFIX not in names)


def projections(model_file: Any, kernels: Kernels, audio: Optional[Kernels] = None,
                plain: bool = False) -> Dict[str, Any]:
    """Projection name (without ".weight") -> `Linear` over the stored bytes (+ float32
    bias), for every tensor `in_place` takes. `audio`: the kernels of the products over
    a window's audio frames (None: numpy's); `plain`: F16 / BF16 weights too."""
    from ..model.weights import Linear
    names = model_file.tensors
    out: Dict[str, Any] = {}
    for name, info in names.items():
        if not in_place(name, info, names, plain):
            continue
        stem = name[:-len(WEIGHT)]
        bias = None
        if stem + BIAS in names:
            raw_bias = model_file.read_raw(stem + BIAS)
            bias = np.asarray(dequantize(raw_bias.data, raw_bias.dtype, raw_bias.shape),
                              np.float32).reshape(-1)                  # [out]
        raw = model_file.read_raw(name)                                 # [out, in] blocks
        out[stem] = Linear(name, raw.data, raw.dtype, raw.shape, bias,
                           kernels=(audio or NUMPY) if over_audio(stem) else kernels)
    return out


def over_audio(stem: str) -> bool:
    """Whether projection `stem` multiplies a window's audio frames (1500 rows)."""
    return stem.startswith("encoder.") or stem.endswith(".cross_attn.kv")


def covered(linears: Dict[str, Any]) -> set:
    """Tensor names the Linears hold (their weights and biases)."""
    return {stem + suffix for stem in linears for suffix in (WEIGHT, BIAS)}


__all__ = ["projections", "in_place", "covered", "over_audio"]
