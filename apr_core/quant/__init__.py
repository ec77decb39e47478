"""Quantization: dequantize/quantize kernels per dtype, chosen through `registry`.

The public API lives in `api` and is re-exported here:
`dequantize`, `dequantize_raw`, `dequantize_rows`, `quantize`, `supported_types`.
Which tensor gets which type (llama.cpp file types such as Q4_K_M) is `recipes.plan`; the
per-tensor quality report and inline validation are in `quality`.
"""
from __future__ import annotations

from .api import (dequantize, dequantize_raw, dequantize_rows, quantize,  # noqa: F401
                  supported_types)

__all__ = ["dequantize", "dequantize_raw", "dequantize_rows", "quantize", "supported_types"]
