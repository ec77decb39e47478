"""Quantization benchmark: apr's numpy kernels against gguf-py, measured in the same run.

    python bench/quant.py [--mb 16] [--repeat 3] [--types Q4_0,Q4_K]

`bench_dequantize()` times `apr_core.quant.dequantize` and `gguf.quants.dequantize` on the
same random block bytes (at least `--mb` MB of float32 output per type) and returns one
row per type: MB/s of float32 output for each side and apr's speed ratio. Random bytes
are fair to both sides: f16 scales never yield float32 subnormals, so NaN/Inf scales do
not hit slow paths. Types gguf-py cannot decode show "-" for it. For F32 gguf-py returns
a view of the input (as apr does), so that row measures call overhead only.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apr_core import dtypes  # noqa: E402
from apr_core.quant import dequantize, supported_types  # noqa: E402
from bench.bench_timing import best_seconds as _best_seconds  # noqa: E402
from bench.gguf_peer import gguf_kernel  # noqa: E402
from bench.quant_quantize import bench_quantize  # noqa: E402

ROW_ELEMENTS = 4096  # a whole number of blocks for every block size (1, 32, 256)


def bench_dequantize(mb: float = 16.0, repeat: int = 3,
                     types: Optional[List[str]] = None) -> List[Dict[str, object]]:
    """Per type: {"type", "apr_mbps", "gguf_mbps" (or None), "ratio" (or None)}."""
    rng = np.random.RandomState(0)
    rows_out = []
    for name in types or supported_types("dequantize"):
        dtype = dtypes.by_name(name)
        n_rows = max(1, int(mb * 1e6 / 4 / ROW_ELEMENTS + 0.999))
        shape = (n_rows, ROW_ELEMENTS)
        data = rng.randint(0, 256, dtype.nbytes(shape), dtype=np.uint8)
        out_mb = n_rows * ROW_ELEMENTS * 4 / 1e6
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            gguf = gguf_kernel("dequantize", dtype)
            byte_rows = data.reshape(n_rows, -1)
            apr_s, gguf_s = _best_seconds(
                [lambda: dequantize(data, dtype, shape),
                 None if gguf is None else lambda: gguf(byte_rows)], repeat)
        apr_mbps = out_mb / apr_s
        gguf_mbps = out_mb / gguf_s if gguf_s else None
        rows_out.append({"type": name, "apr_mbps": apr_mbps, "gguf_mbps": gguf_mbps,
                         "ratio": apr_mbps / gguf_mbps if gguf_mbps else None})
    return rows_out


def _print_table(title: str, rows: List[Dict[str, object]]) -> None:
    print(title)
    print("{:<9} {:>12} {:>12} {:>8}".format("type", "apr MB/s", "gguf MB/s", "ratio"))
    for row in rows:
        gguf = row["gguf_mbps"]
        ratio = row["ratio"]
        print("{:<9} {:>12.0f} {:>12} {:>8}".format(
            row["type"], row["apr_mbps"],
            "-" if gguf is None else "{:.0f}".format(gguf),
            "-" if ratio is None else "{:.2f}x".format(ratio)))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.0, help="MB of float32 output per type")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side (best kept)")
    parser.add_argument("--types", default="", help="comma-separated dtype names (default: all)")
    args = parser.parse_args(argv)
    types = [t.strip().upper() for t in args.types.split(",") if t.strip()] or None
    _print_table("dequantize (MB/s of float32 output, numpy {})".format(np.__version__),
                 bench_dequantize(args.mb, args.repeat, types))
    print("F32: both sides return a view of the input; that row times call overhead only.")
    quantize_types = [t for t in types if t in supported_types("quantize")] if types else None
    if quantize_types != []:
        _print_table("quantize (MB/s of float32 input, numpy {})".format(np.__version__),
                     bench_quantize(args.mb, args.repeat, quantize_types))
    return 0


if __name__ == "__main__":
    sys.exit(main())
