"""A model packed by `apr compile --target pyz`: `python model.pyz "prompt"` answers as
`apr run MODEL "prompt" --chat` does (greedy, the model's chat template; `--raw` completes
the text as given). `python model.pyz --help` lists the flags.

This file is apr_native/compile/pyz_entry.py; inside the archive it is `__main__.py`. It
runs on Python 3.8+ with numpy and nothing else: apr_core (pure Python + numpy) and
apr_run's prompt and sampler modules (`apr_pyz/`) travel in the archive, and the model
either too (stored uncompressed, read in place at its offset) or as a path or URL
(`--external`; a URL is downloaded once into $APR_PYZ_CACHE, default ~/.cache/apr/pyz,
and checked against the sha256 recorded at build time).
"""
from __future__ import annotations

import argparse
import json
import os
import pkgutil
import struct
import sys
import zipfile
from typing import Any, Dict, List, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.io import ByteSource, FileSource, WindowSource
from apr_pyz import prompting, sampler_args

LOCAL_HEADER = struct.Struct("<4s5H3I2H")      # zip local file header, 30 bytes
LOCAL_MAGIC = b"PK\x03\x04"
DOWNLOAD_CHUNK = 1 << 20


def archive_path() -> str:
    """The .pyz file this program runs from (`__main__.py` is a member of it)."""
    return os.path.dirname(os.path.abspath(__file__))


def manifest() -> Dict[str, Any]:
    data = pkgutil.get_data("apr_pyz", "manifest.json")
    return json.loads((data or b"{}").decode("utf-8"))


def member_source(archive: str, member: str) -> ByteSource:
    """The bytes of a stored member, read in place from the archive file."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED:
        raise AprError(ErrorCode.FORMAT, "the model member is compressed; rebuild the "
                       "archive with apr compile", member=member)
    base = FileSource(archive)
    head = base.read(info.header_offset, LOCAL_HEADER.size)
    fields = LOCAL_HEADER.unpack(head)
    if fields[0] != LOCAL_MAGIC:
        base.close()
        raise AprError(ErrorCode.CORRUPT, "bad zip entry header", member=member)
    start = info.header_offset + LOCAL_HEADER.size + fields[-2] + fields[-1]
    return WindowSource(base, start, info.file_size)


def cache_dir() -> str:
    return os.environ.get("APR_PYZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "apr", "pyz")


def download(url: str, sha256: str, size: int) -> str:
    """The file at `url`, fetched once into the cache and checked against `sha256`."""
    import hashlib
    import urllib.request
    folder = cache_dir()
    target = os.path.join(folder, sha256)
    if os.path.isfile(target) and os.path.getsize(target) == size:
        return target
    os.makedirs(folder, exist_ok=True)
    partial = "{}.{}.part".format(target, os.getpid())
    digest = hashlib.sha256()
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "apr-pyz"})
        with urllib.request.urlopen(request) as response, open(partial, "wb") as out:
            for block in iter(lambda: response.read(DOWNLOAD_CHUNK), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != sha256:
            raise AprError(ErrorCode.CHECKSUM, "downloaded model does not match the sha256 "
                           "recorded at build time", url=url, expected=sha256,
                           got=digest.hexdigest())
        os.replace(partial, target)
    except OSError as exc:
        raise AprError(ErrorCode.NETWORK, "cannot download the model: {}".format(exc),
                       url=url)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def model_target(info: Dict[str, Any], verify: bool) -> Any:
    """What `open_model` opens: a window of this archive, a local path or a download."""
    if "member" in info:
        source = member_source(archive_path(), info["member"])
    else:
        location = info["external"]
        if location.startswith(("http://", "https://")):
            return download(location, info["sha256"], info["size"])
        if not os.path.exists(location):
            raise AprError(ErrorCode.IO, "the model this program was built for is not there",
                           path=location)
        if os.path.isdir(location) or "size" not in info:
            return location
        if os.path.getsize(location) != info["size"]:
            raise AprError(ErrorCode.CHECKSUM, "the model file changed since the build "
                           "(size)", path=location, expected=info["size"])
        source = FileSource(location)
    if verify and "sha256" in info:
        from apr_core.integrity import sha256_source
        if sha256_source(source) != info["sha256"]:
            source.close()
            raise AprError(ErrorCode.CHECKSUM, "the model's sha256 does not match the build",
                           expected=info["sha256"])
    return source


def parse_args(argv: Optional[List[str]], info: Dict[str, Any]) -> argparse.Namespace:
    where = info.get("member") or info.get("external")
    p = argparse.ArgumentParser(
        prog=os.path.basename(archive_path()),
        description="Generate text with {} ({}), as `apr run MODEL PROMPT --chat` does: "
        "the model's chat template, greedy unless --temperature.".format(
            info.get("name"), where))
    p.add_argument("prompt", nargs="?", help="the prompt; '-' or none: read it from stdin")
    p.add_argument("-f", "--file", help="read the prompt from this file")
    p.add_argument("-n", "--max-tokens", type=int, default=128,
                   help="generate at most N tokens (default 128)")
    prompting.add_template_arguments(p)                 # --raw | --chat
    p.add_argument("--no-chat", dest="raw", action="store_true", help="same as --raw")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    sampler_args.add_arguments(p)                       # --temperature, --seed, ...
    p.add_argument("--dequantize", action="store_true",
                   help="dequantize weights to f32 at load (faster, more memory)")
    p.add_argument("--verify", action="store_true",
                   help="check the model's sha256 (and an APR file's CRC) before loading")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: text, token_ids, timings")
    p.add_argument("--info", action="store_true", help="print what this archive holds")
    p.set_defaults(chat=True)       # as `apr run --chat`: ChatML for a model without one
    return p.parse_args(argv)


def run(args: argparse.Namespace, info: Dict[str, Any]) -> int:
    from apr_core.formats.open import open_model
    from apr_core.runtime.engine import Engine, EngineOptions
    prompt = prompting.read_prompt(args)
    target = model_target(info, args.verify)
    try:
        engine = Engine.open(info.get("name", "model"),
                             EngineOptions(mmap=False, dequantize=args.dequantize),
                             opener=lambda _name: open_model(target, verify=args.verify))
    finally:
        if isinstance(target, ByteSource):
            target.close()
    ids, template = prompting.prompt_ids(args, engine.model, prompt)
    sampler = sampler_args.config(args)
    if args.json:
        generation = engine.generate(ids, sampler, args.max_tokens, args.stop or (),
                                     ignore_eos=args.ignore_eos)
        result = generation.as_dict()
        result.update(template=template, backend=engine.backend, model=info.get("name"))
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        prompting.warn_if_empty(args, engine.model, template, len(generation.token_ids))
        return 0
    generated = 0
    for piece in engine.stream(ids, sampler, args.max_tokens, args.stop or (),
                               ignore_eos=args.ignore_eos):
        generated += piece.token_id >= 0
        sys.stdout.write(piece.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    prompting.warn_if_empty(args, engine.model, template, generated)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    info = manifest().get("model", {})
    args = parse_args(argv, info)
    if args.info:
        json.dump(manifest(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    try:
        return run(args, info)
    except AprError as err:
        print("error: {}".format(err), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
