"""`apr compile MODEL --target pyz`: one Python zipapp holding apr_core and the model.

    report = build(path, "model.pyz")                  # model bytes inside
    report = build(path, "model.pyz", external="https://host/model.gguf")   # a location
    # then, on any machine with Python 3.8+ and numpy:  python model.pyz "Hi"

Layout of the archive (a `#!/usr/bin/env python3` line, then a zip):

    __main__.py               pyz_entry.py of this package: the command line
    apr_pyz/manifest.json     where the model is (member or external location), its size
                              and sha256, the apr version that built it
    apr_pyz/prompting.py      apr_native/cli/prompting.py, sampler_args.py and
    apr_pyz/sampler_args.py   arg_parser.py, copied: the prompt rule (chat template or raw)
    apr_pyz/arg_parser.py     and the sampler flags of `apr run` with their range checks,
                              which import only apr_core and the stdlib
    apr_core/...              the package (.py files and its data), deflated, with an
                              entry per folder (how zipimport finds namespace packages)
    model/NAME                the model file, stored uncompressed, so the program reads
                              it in place at its offset in the archive (no extraction)

Every entry has the same timestamp, so the same inputs build the same bytes. The archive
is written to a temporary file beside the output and renamed (apr_core.atomic).
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode

SHEBANG = b"#!/usr/bin/env python3\n"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)     # zip's earliest date: reproducible archives
COPY_CHUNK = 8 << 20
Progress = Callable[[int, int], None]        # (bytes done, bytes in all)
MANIFEST = "apr_pyz/manifest.json"
MODEL_DIR = "model/"
PACKAGE_DATA = (".json", ".bin")        # apr_core's package data (pyproject.toml)

_HERE = os.path.dirname(os.path.abspath(__file__))
_CLI = os.path.join(os.path.dirname(_HERE), "cli")
# archive name -> source file; the copied CLI modules import only apr_core and the stdlib
# (the numpy-only test in tests/cli/test_cli_compile_pyz.py holds them to it)
RUNNER_FILES = {
    "__main__.py": os.path.join(_HERE, "pyz_entry.py"),
    "apr_pyz/prompting.py": os.path.join(_CLI, "prompting.py"),
    "apr_pyz/sampler_args.py": os.path.join(_CLI, "sampler_args.py"),
    "apr_pyz/arg_parser.py": os.path.join(_CLI, "arg_parser.py"),    # sampler_args' types
}
RUNNER_INIT = b'"""Support modules of a model zipapp built by `apr compile --target pyz`."""\n'


def apr_core_files() -> List[Tuple[str, str]]:
    """(archive name, source path) of every module and data file of apr_core, sorted."""
    import apr_core
    root = os.path.dirname(os.path.abspath(apr_core.__file__))
    base = os.path.dirname(root)
    found = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py") or (os.path.basename(dirpath) == "data"
                                        and name.endswith(PACKAGE_DATA)):
                path = os.path.join(dirpath, name)
                found.append((os.path.relpath(path, base).replace(os.sep, "/"), path))
    return found


def check_model(path: str, embed: bool) -> Dict[str, Any]:
    """What the archive records about the model (format, name, size); AprError when the
    program could not run it: no tokenizer, or (embedded) not a single file."""
    from apr_core.formats.open import open_model
    from apr_core.runtime.text_model import tokenizer_for
    if embed and (os.path.isdir(path) or path.endswith(".index.json")):
        raise AprError(ErrorCode.UNSUPPORTED, "a model directory cannot be embedded: "
                       "convert it to one file (apr convert) or use --external", path=path)
    with open_model(path, verify=False) as model:
        if embed and model.format == "apr2-sharded":
            raise AprError(ErrorCode.UNSUPPORTED, "a sharded model cannot be embedded: "
                           "convert it to one file or use --external", path=path)
        tokenizer_for(model, path)               # AprError(E010) when there is none
        fmt = model.format
    info: Dict[str, Any] = {"format": fmt, "name": os.path.basename(os.path.normpath(path))}
    if os.path.isfile(path):
        info["size"] = os.path.getsize(path)
    return info


def build(model_path: str, output: str, external: Optional[str] = None,
          overwrite: bool = False, progress: Optional[Progress] = None) -> Dict[str, Any]:
    """Write the zipapp for `model_path` to `output`; `external`: store this path or URL
    instead of the model's bytes. `progress(done, total)` follows the one pass over the
    model's bytes (copied and hashed, or only hashed). Returns the manifest's model entry,
    the size of each part and of the whole file."""
    from apr_native import __version__
    model = check_model(model_path, embed=external is None)
    if external is None:
        model["member"] = MODEL_DIR + model["name"]
    else:
        model["external"] = external
        if "size" in model:
            model["sha256"] = _hash_file(model_path, model["size"], progress)
    parts = {"runner": 0, "apr_core": 0, "model": 0}
    with atomic_output(output, overwrite=overwrite) as handle:
        os.fchmod(handle.fileno(), _executable_mode())      # `./model.pyz` runs it too
        handle.write(SHEBANG)
        with zipfile.ZipFile(handle, "w") as archive:
            for name, source in RUNNER_FILES.items():
                parts["runner"] += _add_file(archive, name, source)
            parts["runner"] += _add_bytes(archive, "apr_pyz/__init__.py", RUNNER_INIT)
            files = apr_core_files()
            for name in _directories(name for name, _ in files):
                archive.writestr(_entry(name, zipfile.ZIP_STORED), b"")
            for name, source in files:
                parts["apr_core"] += _add_file(archive, name, source)
            if external is None:
                model["sha256"] = _add_stored(archive, model["member"], model_path, progress)
                parts["model"] = model["size"]
            manifest = {"pyz_format": 1, "apr_version": __version__, "model": model}
            parts["runner"] += _add_bytes(archive, MANIFEST, json.dumps(
                manifest, indent=1, sort_keys=True).encode("utf-8"))
    size = os.path.getsize(output)
    return {"output": output, "model": model, "parts": parts,
            "overhead": size - sum(parts.values()), "size": size}


def _directories(names: Iterable[str]) -> List[str]:
    """Every folder above `names`, as zip directory entries ("a/b/"): zipimport finds a
    namespace package (a folder without __init__.py, e.g. apr_core/runtime) only by its
    directory entry."""
    found = set()
    for name in names:
        parts = name.split("/")[:-1]
        found.update("/".join(parts[:i]) + "/" for i in range(1, len(parts) + 1))
    return sorted(found)


def _executable_mode() -> int:
    """rwxr-xr-x as the umask allows (the temporary file starts 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def _entry(name: str, compress: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = compress
    # unix mode in the high 16 bits; a folder also carries the MS-DOS directory bit
    info.external_attr = (0o40755 << 16) | 0x10 if name.endswith("/") else 0o644 << 16
    return info


def _add_bytes(archive: zipfile.ZipFile, name: str, data: bytes) -> int:
    """Deflate `data` into the archive; returns its compressed size."""
    info = _entry(name, zipfile.ZIP_DEFLATED)
    archive.writestr(info, data, compresslevel=9)
    return archive.getinfo(name).compress_size


def _add_file(archive: zipfile.ZipFile, name: str, path: str) -> int:
    with open(path, "rb") as handle:
        return _add_bytes(archive, name, handle.read())


def _chunks(path: str, size: int, progress: Optional[Progress]) -> Iterator[bytes]:
    done = 0
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(COPY_CHUNK), b""):
            done += len(block)
            if progress is not None:
                progress(done, size)
            yield block


def _hash_file(path: str, size: int, progress: Optional[Progress]) -> str:
    digest = hashlib.sha256()
    for block in _chunks(path, size, progress):
        digest.update(block)
    return digest.hexdigest()


def _add_stored(archive: zipfile.ZipFile, name: str, path: str,
                progress: Optional[Progress]) -> str:
    """Copy the file in uncompressed (the program reads it at its offset); its sha256."""
    info = _entry(name, zipfile.ZIP_STORED)
    info.file_size = os.path.getsize(path)
    digest = hashlib.sha256()
    with archive.open(info, "w", force_zip64=True) as target:
        for block in _chunks(path, info.file_size, progress):
            digest.update(block)
            target.write(block)
    return digest.hexdigest()


__all__ = ["build", "check_model", "apr_core_files", "RUNNER_FILES", "MANIFEST"]
