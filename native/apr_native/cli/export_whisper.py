"""`apr export WHISPER.apr --format whisper.cpp [--quantize q8_0|q5_0|...] -o ggml-base.bin`.

Writes the legacy ggml model file whisper.cpp loads (apr_core.conversion.whisper_ggml):
the weight matrices in the stored type when they share one whisper.cpp file type (an APR
quantized by `apr convert --quantize Q8_0` keeps its Q8_0 blocks), else F16; `--quantize`
picks the type (F16, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, K types). An all-F32 file is refused:
whisper.cpp's CPU convolution needs F16 kernels, which such a file cannot hold.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from apr_core.conversion.whisper_ggml import export_whisper_cpp

from ..config import wants_json
from .common import emit_json, human_bytes

FORMAT = "whisper.cpp"


def run_export_whisper(args: argparse.Namespace, path: str, output: str) -> int:
    kind = {"f32": "F32", "f16": "F16"}.get(args.precision or "", args.quantize)
    start = time.perf_counter()
    summary = export_whisper_cpp(path, output, kind, overwrite=True)
    result = {"input": path, "output": output, "format": FORMAT, "type": summary["type"],
              "tensors": summary["tensors"], "bytes": os.path.getsize(output),
              "seconds": round(time.perf_counter() - start, 3)}
    if wants_json(args):
        emit_json(result)
    else:
        print("exported {} -> {} ({}, {}, {}) in {:.2f}s".format(
            path, output, FORMAT, summary["type"], human_bytes(result["bytes"]),
            result["seconds"]), file=sys.stdout)
    return 0
