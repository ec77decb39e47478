"""`apr export MODEL --format safetensors|gguf|whisper.cpp [--quantize TYPE] -o OUT`.

Exporting is `convert()` (apr_core.conversion.convert) with the target format fixed: tensors
keep their bytes unless `--quantize`/`--precision` re-encode them, GGUF KV pairs and
tokenizer metadata that came from a GGUF source travel back unchanged, and a Hugging Face
source becomes a llama.cpp model (GGUF names, layouts and tokenizer keys) inside convert().

SafeTensors has no block-quantized dtypes, so a quantized tensor is written as float32
(what transformers and `safetensors.load_file` read); `--raw-blocks` keeps the blocks'
bytes as U8 tensors instead, which only apr reads back, with a warning that says so.
`--format whisper.cpp` writes a Whisper model as whisper.cpp's ggml file (export_whisper).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from apr_core.errors import AprError, ErrorCode
from apr_core.conversion.convert import apr_metadata, convert, output_format
from apr_core.conversion.lora_merge import merge_lora
from apr_core.formats.open import open_model
from apr_core.name_maps import architectures, name_map
from apr_core.tensor import LazyTensor
from apr_core.transforms.view import ModelView
from apr_core.conversion.quality import QualityReport

from ..config import wants_json
from . import lora_args
from .common import check_output, emit_json, human_bytes, resolve_model
from .quantize_cmd import progress_bar


FORMATS = ("safetensors", "gguf", "apr", "whisper.cpp")
EXTENSIONS = {"safetensors": ".safetensors", "gguf": ".gguf", "apr": ".apr",
              "whisper.cpp": ".bin"}


def source_named(path: str) -> Any:
    """`path`, or a view with its source's tensor names back when it was imported with
    canonical APR names (`apr import --names apr`): GGUF readers want GGUF names."""
    model = open_model(path, verify=False)
    scheme = model.metadata.get("name_source")
    arch = model.metadata.get("model_type")
    model.close()
    if not scheme or arch not in architectures():
        return path
    model = open_model(path)   # renaming: now read it with full verification
    renamed = name_map(arch).translate(list(model.tensors), "apr", scheme)
    meta = apr_metadata(model)
    meta.pop("name_source", None)
    return ModelView(meta, [LazyTensor(renamed[t.name], t.dtype, t.shape, t.loader)
                            for t in model.lazy_tensors()])


def run_export(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    fmt = args.format or (output_format(args.output) if args.output else None)
    if fmt is None:
        raise AprError(ErrorCode.ARGUMENT, "--format is required (or an -o with a .gguf, "
                       ".apr or .safetensors extension)")
    if fmt not in FORMATS:
        raise AprError(ErrorCode.UNSUPPORTED, "export format not supported (ONNX and "
                       "TorchScript need a graph, which APR files do not carry)",
                       format=fmt, supported=list(FORMATS))
    output = args.output or os.path.splitext(os.path.basename(path))[0] + EXTENSIONS[fmt]
    check_output(output, args.force)
    if fmt == "whisper.cpp" and args.merge_lora:
        raise AprError(ErrorCode.ARGUMENT, "--merge-lora applies to decoder models, not to a "
                       "whisper.cpp export")
    if fmt == "whisper.cpp":
        from .export_whisper import run_export_whisper
        return run_export_whisper(args, path, output)
    report = QualityReport()
    raw_blocks = fmt == "safetensors" and args.raw_blocks
    if raw_blocks:
        report.warnings.append(
            "--raw-blocks: block-quantized tensors are stored as raw U8 bytes that only apr "
            "reads back; transformers and safetensors users get unusable tensors (drop the "
            "flag for float32)")
    start = time.perf_counter()
    options = dict(quantize=args.quantize, precision=args.precision,
                   dequantize=fmt == "safetensors" and not raw_blocks, overwrite=True,
                   force=args.force, report=report)
    merged = None
    with progress_bar("exporting") as progress:
        if args.merge_lora:
            merged = merge_lora(path, args.merge_lora, output, fmt, progress=progress,
                                **options)["merged"]
        else:
            convert(source_named(path), output, fmt, progress=progress, **options)
    result = {"input": path, "output": output, "format": fmt, "quantize": args.quantize,
              "bytes": os.path.getsize(output), "warnings": report.warnings,
              "seconds": round(time.perf_counter() - start, 3)}
    if merged is not None:
        result["lora"] = [{"path": p, "scale": s} for p, s in args.merge_lora]
        result["merged_tensors"] = merged
    if wants_json(args):
        emit_json(result)
    else:
        for warning in report.warnings:
            print("warning: {}".format(warning), file=sys.stderr)
        print("exported {} -> {} ({}, {}) in {:.2f}s".format(
            path, output, fmt, human_bytes(result["bytes"]), result["seconds"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a model to SafeTensors, GGUF or whisper.cpp")
    p.add_argument("model")
    p.add_argument("--format",
                   help="safetensors, gguf or whisper.cpp (a Whisper model; apr also "
                   "accepted); default: from -o's extension")
    p.add_argument("-o", "--output", help="output path (default: MODEL name + extension)")
    p.add_argument("--quantize", metavar="TYPE|FILETYPE",
                   help="q8_0, q4_k ... or a llama.cpp file type (Q4_K_M)")
    p.add_argument("--precision", choices=["f32", "f16", "bf16"])
    blocks = p.add_mutually_exclusive_group()
    blocks.add_argument("--dequantize", action="store_true",
                        help="SafeTensors: write block-quantized tensors as F32 (the default)")
    blocks.add_argument("--raw-blocks", action="store_true",
                        help="SafeTensors: keep block-quantized tensors as raw U8 bytes "
                        "(only apr reads them back; warns)")
    p.add_argument("--merge-lora", action="append", type=lora_args.parse_spec, default=[],
                   metavar="FILE[:SCALE]",
                   help="merge a LoRA adapter (PEFT directory or GGUF LoRA; repeatable) into "
                   "the weights it targets: each is written as dequantized base + "
                   "SCALE*alpha/r*BA, in the base tensor's type when that is F32/F16/BF16, "
                   "as F16 when the base is block-quantized (Q4_K, Q8_0 ...; --quantize "
                   "re-encodes); every other tensor keeps its bytes")
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing output and ignore inline validation failures")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_export)
