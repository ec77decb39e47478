"""`apr debug` (plain or "drama" mode, seed 000 §4.3) and `apr hex` (raw bytes).

    apr debug M [--drama]          what the file is, act by act, and a verdict
    apr debug M --hex [--limit N]  hex dump of the first N bytes (default 256)
    apr debug M --strings          printable strings of the header region (up to --limit)
    apr hex M --tensor NAME        a tensor's bytes (row-major, decoded) and first values
    apr hex M [--offset O]         the file's bytes from offset O

Drama mode is plain text (no terminal needed): CI logs read the same as a terminal.
"""
from __future__ import annotations

import argparse
import os
import re
import string
from typing import Any, Dict, List, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.detect import detect_format
from apr_core.formats.open import open_model
from apr_core.io import FileSource

from . import model_info
from .common import EXIT_OK, emit_json, human_bytes, resolve_model
from .render import console, wants_json


# Bytes shown by --hex / apr hex (seed 000 §8 `hex_limit`).
HEX_LIMIT = 256
# Longest header region --strings scans when the format does not say where data starts.
STRINGS_SCAN = 1 << 20
MIN_STRING = 4
_PRINTABLE = set(string.printable.encode()) - set(b"\t\n\r\x0b\x0c")


def hexdump(data: bytes, base: int = 0) -> List[str]:
    """Classic 16-bytes-per-line dump: offset, hex in two groups of 8, ASCII."""
    lines = []
    for pos in range(0, len(data), 16):
        row = data[pos:pos + 16]
        hexes = " ".join("{:02x}".format(b) for b in row[:8]) + "  " + \
            " ".join("{:02x}".format(b) for b in row[8:])
        text = "".join(chr(b) if b in _PRINTABLE else "." for b in row)
        lines.append("{:08x}  {:<49s} |{}|".format(base + pos, hexes, text))
    return lines


def strings_in(data: bytes, limit: int, minimum: int = MIN_STRING) -> List[Dict[str, Any]]:
    """Printable ASCII runs of at least `minimum` bytes, with their offsets."""
    out = []
    pattern = re.compile(rb"[\x20-\x7e]{%d,}" % minimum)
    for match in pattern.finditer(data):
        out.append({"offset": match.start(), "text": match.group().decode("ascii")})
        if len(out) >= limit:
            break
    return out


def _read_head(path: str, length: int, offset: int = 0) -> bytes:
    with FileSource(path) as source:
        offset = min(max(offset, 0), source.size)
        return source.read(offset, min(length, source.size - offset))


def _header_end(model: Any) -> int:
    for key in ("data_offset", "data_start"):
        value = getattr(model, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return STRINGS_SCAN


def run_debug(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    if not os.path.isfile(path):
        raise AprError(ErrorCode.ARGUMENT, "debug works on a single file", path=path)
    if args.drama:
        return _drama(path)
    out = console()
    if args.hex:
        data = _read_head(path, args.limit or HEX_LIMIT)
        if wants_json(args):
            emit_json({"path": path, "offset": 0, "hex": data.hex()})
            return 0
        for line in hexdump(data):
            out.print(line)
        return 0
    if args.strings:
        with open_model(path, verify=False) as model:
            end = _header_end(model)
        found = strings_in(_read_head(path, min(end, STRINGS_SCAN)), args.limit or HEX_LIMIT)
        if wants_json(args):
            emit_json({"path": path, "strings": found})
            return 0
        for item in found:
            out.print("{:08x}  {}".format(item["offset"], item["text"]))
        return 0
    with open_model(path, verify=False) as model:
        info = {"path": path, "format": model.format, "file_size": os.path.getsize(path),
                "magic": _read_head(path, 4).hex(), "tensors": len(model.tensors),
                "metadata_keys": len(model.metadata),
                "first_tensor": next(iter(model.tensors), None),
                "last_tensor": next(reversed(list(model.tensors)), None),
                "warnings": list(getattr(model, "warnings", []) or [])}
    if wants_json(args):
        emit_json(info)
        return 0
    for key, value in info.items():
        out.print("{:14s} {}".format(key + ":", value))
    return 0


def _drama(path: str) -> int:
    """The file told as a play in three acts; a broken file ends as a tragedy (and the
    error is raised so the exit code and one-line message are the usual ones)."""
    from .validate_cmd import validate_file
    out = console()
    out.print("====[ DRAMA: {} ]====".format(os.path.basename(path)))
    out.print("")
    out.print("ACT I: THE HEADER")
    with FileSource(path) as source:
        magic = source.read(0, min(4, source.size))
        try:
            detect_format(source)
            unknown = None
        except AprError as err:
            unknown = err
    shown = magic.decode("latin-1") if all(b in _PRINTABLE for b in magic) else magic.hex()
    if unknown is not None:
        out.print("  Scene 1: Magic bytes... {!r} (the audience gasps: who is this?)".format(
            shown))
        out.print("")
        out.print("ACT III: THE VERDICT")
        _tragedy(out, "this is not a model apr can read.")
        raise unknown
    out.print("  Scene 1: Magic bytes... {} (applause!)".format(shown))
    try:
        model = open_model(path, verify=False)
    except AprError as err:
        _tragedy(out, "the header cannot be read: {}".format(err.message))
        raise
    with model:
        version = model_info.header_fields(model, path).get("version")
        out.print("  Scene 2: Format... {} version {} (standing ovation!)".format(
            model.format.upper(), version))
        params = sum(t.n_elements for t in model.tensors.values())
        meta = model_info.metadata(model, path)
        tokens = model_info.vocab_tokens(meta)
        found = model_info.family(model, meta)
        out.print("")
        out.print("ACT II: THE METADATA")
        out.print("  Scene 1: Parameters... {:,} (a cast of {}!)".format(
            params, "millions" if params >= 1e6 else "thousands" if params >= 1e3 else "few"))
        out.print("  Scene 2: Tensors... {} take the stage, {} in total".format(
            len(model.tensors), human_bytes(sum(t.nbytes for t in model.tensors.values()))))
        out.print("  Scene 3: Vocabulary... {}".format(
            "{:,} tokens (a dictionary of a hero!)".format(len(tokens)) if tokens
            else "none (a silent film)"))
        out.print("  Scene 4: Family... {}".format(
            "{} (a famous lineage!)".format(found[0].name) if found else
            "unknown (a mysterious stranger)"))
        for warning in getattr(model, "warnings", []) or []:
            out.print("  Aside: {} (murmurs in the stalls)".format(warning))
    out.print("")
    out.print("ACT III: THE VERDICT")
    result = validate_file(path, ranges=True, shapes=True)
    if result["problems"]:
        problem = result["problems"][0]
        _tragedy(out, "{} {}".format(problem["code"], problem["message"]))
        raise AprError(ErrorCode[problem["code"]], problem["message"], path=path)
    for finding in result["findings"]:
        out.print("  Plot twist: {}: {}".format(finding["tensor"], finding["message"]))
    for problem in result["shape_problems"]:
        out.print("  Plot twist: {}".format(problem))
    if result["valid"]:
        out.print("  CURTAIN CALL: Model is PRODUCTION READY! ({} tensors checked)".format(
            result["tensors_checked"]))
        return EXIT_OK
    out.print("  CURTAIN CALL: the model survives, but the critics are unkind.")
    return result["exit_code"]


def _tragedy(out: Any, why: str) -> None:
    out.print("  TRAGEDY: {}".format(why))
    out.print("  The curtain falls. No encore.")


def run_hex(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    limit = args.limit or HEX_LIMIT
    out = console()
    if not args.tensor:
        data = _read_head(path, limit, args.offset)
        if wants_json(args):
            emit_json({"path": path, "offset": args.offset, "hex": data.hex()})
            return 0
        for line in hexdump(data, args.offset):
            out.print(line)
        return 0
    from apr_core import stats as st
    with open_model(path, verify=False) as model:
        tensors = {t.name: t for t in st.logical_tensors(model)}
        if args.tensor not in tensors:
            from .explain_cmd import suggestions
            raise AprError(ErrorCode.NOT_FOUND, "no such tensor", tensor=args.tensor,
                           did_you_mean=suggestions(args.tensor, list(tensors)))
        tensor = tensors[args.tensor]
        info = model.info(args.tensor)
        data = tensor.load()
        values = st.tensor_values(tensor).reshape(-1)[:args.values]
    report: Dict[str, Any] = {"tensor": tensor.name, "dtype": tensor.dtype.name,
                              "shape": list(tensor.shape), "file_offset": info.offset,
                              "stored_size": info.size, "nbytes": len(data),
                              "hex": data[:limit].hex(),
                              "values": [float(v) for v in values]}
    if wants_json(args):
        emit_json(report)
        return 0
    out.print("{}  {} {}  file offset {} ({} stored, {} decoded)".format(
        tensor.name, tensor.dtype.name, list(tensor.shape), info.offset, info.size, len(data)))
    for line in hexdump(data[:limit]):
        out.print(line)
    out.print("first {} values: {}".format(len(values), " ".join(
        "{:.6g}".format(v) for v in values)))
    return 0


def _limit(text: str) -> Optional[int]:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of bytes")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("debug", help="what a file is, in plain words (--drama: as a play); "
                       "--hex / --strings for raw bytes")
    p.add_argument("model")
    p.add_argument("--drama", action="store_true", help="theatrical walk through the file")
    p.add_argument("--hex", action="store_true", help="hex dump of the first --limit bytes")
    p.add_argument("--strings", action="store_true",
                   help="printable strings in the header region")
    p.add_argument("--limit", type=_limit, help="bytes for --hex / strings for --strings "
                   "(default {})".format(HEX_LIMIT))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_debug)
    p = sub.add_parser("hex", help="hex dump of a tensor's bytes (--tensor) or of the file")
    p.add_argument("model")
    p.add_argument("--tensor", help="tensor name")
    p.add_argument("--offset", type=int, default=0, help="file offset (without --tensor)")
    p.add_argument("--limit", type=_limit, help="bytes to show (default {})".format(HEX_LIMIT))
    p.add_argument("--values", type=int, default=16, help="decoded values to show (--tensor)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_hex)
