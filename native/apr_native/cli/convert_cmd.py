"""`apr convert` / `apr validate`: format conversion (re-encoding with --quantize /
--precision, see quantize_cmd), and integrity checks."""
from __future__ import annotations

import argparse
import time

from apr_core.errors import AprError
from apr_core.formats.convert import convert
from apr_core.formats.open import open_model

from .common import emit_json, parse_size, resolve_model
from .quantize_cmd import add_retype_arguments, run_conversion


def run_convert(args: argparse.Namespace) -> int:
    if args.quantize or args.precision:
        return run_conversion(args, args.quantize)
    path = resolve_model(args.model)
    start = time.perf_counter()
    fmt = convert(path, args.output, args.format, compression=args.compress,
                  alignment=args.alignment,
                  max_shard_size=parse_size(args.shard_size) if args.shard_size else None,
                  dequantize=args.dequantize, overwrite=args.force)
    result = {"input": path, "output": args.output, "format": fmt,
              "seconds": round(time.perf_counter() - start, 3)}
    if args.json:
        emit_json(result)
    else:
        print("wrote {} ({}) in {:.2f}s".format(args.output, fmt, result["seconds"]))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """Open with full verification (checksums, layout) and decode every tensor."""
    path = resolve_model(args.model)
    problems = []
    count = 0
    try:
        with open_model(path, verify=True) as model:
            for name in model.tensors:
                model.read_raw(name)
                count += 1
            warnings = list(getattr(model, "warnings", []) or [])
    except AprError as err:
        problems.append(err.to_dict())
        warnings = []
    result = {"path": path, "valid": not problems, "tensors_checked": count,
              "problems": problems, "warnings": warnings}
    if args.json:
        emit_json(result)
    else:
        for warning in warnings:
            print("warning: {}".format(warning))
        if problems:
            print("INVALID: {} {}".format(problems[0]["code"], problems[0]["message"]))
        else:
            print("VALID: {} tensors checked".format(count))
    return 0 if not problems else 5


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert between APR, GGUF and SafeTensors")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True,
                   help="output path; the extension picks the format")
    p.add_argument("--format", choices=["apr", "gguf", "safetensors"])
    p.add_argument("--compress", help="APR payload compression: lz4, zstd or zstd:LEVEL")
    p.add_argument("--alignment", type=int, default=64, choices=[32, 64])
    p.add_argument("--shard-size", help="write a sharded APR model, e.g. 512M")
    p.add_argument("--dequantize", action="store_true",
                   help="SafeTensors output: dequantize block types to F32 instead of packing")
    p.add_argument("--quantize", metavar="TYPE|FILETYPE",
                   help="a plain type in lower case (q4_k, q8_0) or a llama.cpp file type "
                        "(Q4_K_M, Q8_0: its recipe)")
    add_retype_arguments(p)
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing output (and, when re-encoding, ignore "
                        "validation failures)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_convert)
    p = sub.add_parser("validate", help="verify checksums and structure, decode every tensor")
    p.add_argument("model")
    p.add_argument("--checksum", action="store_true", help="(always on) verify checksums")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_validate)
