"""Quantize half of the quantization benchmark (`bench/quant.py` calls `bench_quantize`).

`bench_quantize()` times `apr_core.quant.quantize` and `gguf.quants.quantize` on the same
random float32 rows (normal distribution, at least `mb` MB of float32 input per type) and
returns one row per type: MB/s of float32 input for each side and apr's speed ratio.
gguf-py has numpy quantizers for F16, BF16 and the 32-element block types only; the
K-quants show "-" for it (their peer is ggml's C, which is not a numpy peer).
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional

import numpy as np

from apr_core import dtypes
from apr_core.quant import quantize, supported_types
from bench.bench_timing import best_seconds as _best_seconds
from bench.gguf_peer import gguf_kernel

ROW_ELEMENTS = 4096  # a whole number of blocks for every block size (1, 32, 256)


def bench_quantize(mb: float = 16.0, repeat: int = 3,
                   types: Optional[List[str]] = None) -> List[Dict[str, object]]:
    """Per type: {"type", "apr_mbps", "gguf_mbps" (or None), "ratio" (or None)}."""
    rng = np.random.RandomState(0)
    n_rows = max(1, int(mb * 1e6 / 4 / ROW_ELEMENTS + 0.999))
    values = rng.standard_normal((n_rows, ROW_ELEMENTS)).astype(np.float32)
    in_mb = values.nbytes / 1e6
    rows_out = []
    for name in types or supported_types("quantize"):
        dtype = dtypes.by_name(name)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            gguf = gguf_kernel("quantize", dtype)
            apr_s, gguf_s = _best_seconds(
                [lambda: quantize(values, dtype),
                 None if gguf is None else lambda: gguf(values)], repeat)
        apr_mbps = in_mb / apr_s
        gguf_mbps = in_mb / gguf_s if gguf_s else None
        rows_out.append({"type": name, "apr_mbps": apr_mbps, "gguf_mbps": gguf_mbps,
                         "ratio": apr_mbps / gguf_mbps if gguf_mbps else None})
    return rows_out
