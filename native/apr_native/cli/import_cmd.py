"""`apr import SOURCE [-o OUT.apr]`: SafeTensors (file, sharded, HF directory), GGUF,
PyTorch (`.pt/.pth/.bin`, read by the restricted unpickler) or a CTranslate2 Whisper
directory (`import_ct2.py`) into APR v2.

The import pipeline (seed 000 §13): open the source (a reference -- `hf://ORG/REPO...`,
`https://...` -- is fetched and verified first, as every command does), find its architecture (file metadata, else the
tensor names, else `--arch`), check every tensor name against that architecture's name map
(§10.8), optionally rename to the canonical APR names (`--names apr`), and write through
`convert()` while every float tensor is checked inline (§10.10: NaN/Inf, norm means) --
a failed check aborts unless `--force`. Without `-o` the model goes to the cache
(`$APR_CACHE/models/<name>.apr`); importing the same source (same sha256) again is a cache
hit that writes nothing.

Default names stay as in the source, because the runtime's family contracts name tensors
in the "hf" and "gguf" schemes; `--names apr` gives the seed's canonical names (and records
the scheme they came from under `name_source`).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.integrity import sha256_file
from apr_core.conversion.convert import apr_metadata, convert
from apr_core.formats.hf_dir import hf_directory, read_side_files
from apr_core.formats.open import open_model
from apr_core.name_maps import architectures, detect, name_map
from apr_core.conversion.quality import QualityReport
from apr_core.tensor import LazyTensor, ModelFile
from apr_core.transforms.view import ModelView

from ..config import models_dir, wants_json
from ..pickle_safe import is_torch_file, open_torch
from .common import check_output, emit_json
from .quantize_cmd import progress_bar


REMOTE = re.compile(r"^(hf|https?|s3|gs)://")
TORCH_EXTENSIONS = (".pt", ".pth", ".bin")
NON_COMMERCIAL = re.compile(r"(^|[-_ ])nc([-_ ]|$)|non-?commercial", re.IGNORECASE)


def open_any(source: str) -> Tuple[ModelFile, Optional[str]]:
    """(model, directory holding config.json/README.md or None) for a local source."""
    if REMOTE.match(source):
        raise AprError(ErrorCode.UNSUPPORTED, "remote import is not available: apr never "
                       "downloads; fetch the files yourself and import the local path",
                       source=source)
    if not os.path.exists(source):
        raise AprError(ErrorCode.IO, "no such file or directory", path=source)
    if os.path.isdir(source):
        names = sorted(os.listdir(source))
        if any(n.endswith(".safetensors") or n.endswith(".safetensors.index.json")
               for n in names):
            return open_model(source), source
        torch_files = [n for n in names if n.endswith(TORCH_EXTENSIONS)]
        if len(torch_files) == 1:
            return open_torch(os.path.join(source, torch_files[0])), source
        raise AprError(ErrorCode.IO, "no SafeTensors weights or single PyTorch checkpoint "
                       "in directory", path=source, checkpoints=len(torch_files))
    folder = os.path.dirname(os.path.abspath(source))
    if source.endswith(TORCH_EXTENSIONS) and is_torch_file(source):
        return open_torch(source), folder
    return open_model(source), folder


def source_digest(source: str) -> str:
    """sha256 of a file; for a directory, of each file's name and sha256 (sorted)."""
    if os.path.isfile(source):
        return sha256_file(source)
    digest = hashlib.sha256()
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if os.path.isfile(path):
            digest.update("{}\0{}\n".format(name, sha256_file(path)).encode("utf-8"))
    return digest.hexdigest()


def _readme_license(folder: Optional[str]) -> Optional[str]:
    """`license:` from a model card's YAML front matter (README.md)."""
    path = os.path.join(folder, "README.md") if folder else ""
    if not path or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read(1 << 16)
    front = re.match(r"^---\s*\n(.*?)\n---", text, re.DOTALL)
    found = re.search(r"^license:\s*['\"]?([^'\"\n]+)", front.group(1), re.MULTILINE) \
        if front else None
    return found.group(1).strip() if found else None


def source_arch(meta: Dict[str, Any], cfg: Optional[Dict[str, Any]]) -> Optional[str]:
    """The architecture the source's own metadata states, if any."""
    if cfg and cfg.get("model_type"):
        return str(cfg["model_type"])
    kv = (meta.get("gguf") or {}).get("kv") or {}
    if kv.get("general.architecture"):
        return str(kv["general.architecture"])
    kind = meta.get("model_type")
    return str(kind) if kind and kind != "unknown" else None


def resolve_arch(stated: Optional[str], requested: Optional[str], names: List[str],
                 force: bool, warnings: List[str]) -> Tuple[Optional[str], Optional[str]]:
    """(architecture, naming scheme); AprError when unknown or contradicted, unless forced."""
    known = architectures()
    if requested and stated and requested != stated:
        problem = AprError(ErrorCode.VALIDATION, "architecture mismatch", expected=requested,
                           found=stated)
        if not force:
            raise problem
        warnings.append(str(problem))
    arch = requested or stated
    if arch is None:
        found = detect(names)
        if found is None:
            if force:
                warnings.append("architecture unknown; imported without a name map")
                return None, None
            raise AprError(ErrorCode.VALIDATION, "cannot detect the architecture from the "
                           "tensor names: pass --arch", known=list(known))
        return found
    if arch not in known:
        if force:
            warnings.append("architecture {!r} has no name map; names kept".format(arch))
            return arch, None
        raise AprError(ErrorCode.UNSUPPORTED, "unknown architecture (pass --arch, or --force "
                       "to import without a name map)", architecture=arch, known=list(known))
    mapping = name_map(arch)
    for scheme in mapping.schemes():
        if all(mapping.known(n, scheme) for n in names):
            return arch, scheme
    unknown = [n for n in names if not any(mapping.known(n, s) for s in mapping.schemes())]
    problem = AprError(ErrorCode.VALIDATION, "tensor name is not in the {} name map"
                       .format(arch), tensor=(unknown or names)[0], unknown=len(unknown))
    if not force:
        raise problem
    warnings.append(str(problem))
    return arch, None


def checked(tensor: LazyTensor, force: bool, report: QualityReport) -> LazyTensor:
    """`tensor` whose loader runs the §10.10 inline checks on float values (failures abort,
    or with `force` land in `report.warnings`)."""
    if tensor.dtype.name not in ("F32", "F16", "BF16"):
        return tensor

    def load() -> bytes:
        from apr_core.quant import dequantize
        from apr_core.conversion.quality import validate
        data = tensor.load()
        validate(tensor.name, dequantize(data, tensor.dtype, tensor.shape), force, report)
        return data
    return LazyTensor(tensor.name, tensor.dtype, tensor.shape, load)


def build_view(model: ModelFile, meta: Dict[str, Any], arch: Optional[str],
               scheme: Optional[str], names: str, force: bool,
               report: QualityReport) -> ModelView:
    renamed = {n: n for n in model.tensors}
    if names == "apr" and arch and scheme:
        renamed = name_map(arch).translate(list(model.tensors), scheme, "apr")
        meta["name_source"] = scheme
    tensors = []
    for name in model.tensors:
        lazy = model.lazy(name)
        tensors.append(checked(LazyTensor(renamed[name], lazy.dtype, lazy.shape, lazy.loader),
                               force, report))
    return ModelView(meta, tensors)


def _license_warnings(license_name: Optional[str], warnings: List[str]) -> None:
    if not license_name:
        warnings.append("source has no license metadata (model card or general.license)")
    elif NON_COMMERCIAL.search(license_name):
        warnings.append("license {!r} restricts commercial use".format(license_name))


def _cached(output: str, digest: Optional[str]) -> bool:
    if not digest or not os.path.isfile(output):
        return False
    try:
        with open_model(output, verify=False) as model:
            return (model.metadata.get("provenance") or {}).get("sha256") == digest
    except AprError:
        return False


def run_import(args: argparse.Namespace) -> int:
    from apr_core.refs import is_reference
    from .common import resolve_model
    source = resolve_model(args.source) if is_reference(args.source) else args.source
    single = os.path.isfile(source)
    if args.sha256 and not single:
        raise AprError(ErrorCode.ARGUMENT, "--sha256 needs a single-file source", path=source)
    digest = source_digest(source) if os.path.exists(source) else None
    if args.sha256 and digest != args.sha256.lower():
        raise AprError(ErrorCode.CHECKSUM, "source sha256 does not match", path=source,
                       expected=args.sha256.lower(), got=digest)
    to_cache = args.output is None
    stem = os.path.splitext(os.path.basename(os.path.normpath(source)))[0]
    output = args.output or str(models_dir() / (stem + ".apr"))
    if to_cache and not args.force and _cached(output, digest):
        return _report(args, {"input": source, "output": output, "cached": True,
                              "sha256": digest, "warnings": []})
    # A stale cache entry (its source changed) is ours to replace; an -o file is not.
    check_output(output, args.force or to_cache)
    from apr_core.conversion.whisper_ct2 import is_ctranslate2_dir
    from apr_core.conversion.whisper_hf import is_hf_whisper_dir
    if is_ctranslate2_dir(source):
        from .import_ct2 import import_ctranslate2
        return import_ctranslate2(args, source, output, digest, to_cache, _report)
    if is_hf_whisper_dir(source):
        from .import_ct2 import import_hf_whisper
        return import_hf_whisper(args, source, output, digest, to_cache, _report)
    start = time.perf_counter()
    warnings: List[str] = []
    model, folder = open_any(source)
    try:
        meta = apr_metadata(model, source)
        if model.format == "pytorch" and folder and hf_directory(folder):
            # A PyTorch HF directory carries the same side files a SafeTensors one does.
            for key, value in read_side_files(folder).items():
                meta.setdefault(key, value)
        cfg = meta.get("hf_config") if isinstance(meta.get("hf_config"), dict) else None
        names = list(model.tensors)
        arch, scheme = resolve_arch(source_arch(meta, cfg), args.arch, names, args.force,
                                    warnings)
        meta.setdefault("apr_version", "2.0.0")
        meta.setdefault("architecture", {})
        if arch and meta.get("model_type") in (None, "unknown"):
            meta["model_type"] = arch
        kv = (meta.get("gguf") or {}).get("kv") or {}
        license_name = kv.get("general.license") or _readme_license(folder) or \
            meta.get("license")
        if license_name:
            meta["license"] = str(license_name)
        _license_warnings(license_name, warnings)
        meta["provenance"] = {"source": os.path.basename(os.path.normpath(source)),
                              "source_format": model.format, "sha256": digest,
                              "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        report = QualityReport()
        view = build_view(model, meta, arch, scheme, args.names, args.force, report)
        if to_cache:
            os.makedirs(os.path.dirname(output), exist_ok=True)
        with progress_bar("importing") as progress:
            convert(view, output, "apr", quantize=args.quantize, compression=args.compress,
                    overwrite=True, force=args.force, report=report, progress=progress)
        count = len(view.tensors)
        warnings.extend(dict.fromkeys(report.warnings))   # each problem once, in order
    finally:
        model.close()
    return _report(args, {"input": source, "output": output, "cached": False,
                          "architecture": arch, "names": args.names if scheme else "source",
                          "name_source": scheme, "tensors": count, "sha256": digest,
                          "warnings": warnings,
                          "seconds": round(time.perf_counter() - start, 3)})


def _report(args: argparse.Namespace, result: Dict[str, Any]) -> int:
    if wants_json(args):
        emit_json(result)
        return 0
    for warning in result["warnings"]:
        print("warning: {}".format(warning), file=sys.stderr)
    if result["cached"]:
        print("cached: {} (source sha256 unchanged)".format(result["output"]))
    else:
        print("imported {} tensors ({}) -> {} in {:.2f}s".format(
            result["tensors"], result["architecture"] or "unknown architecture",
            result["output"], result["seconds"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="import SafeTensors, GGUF or PyTorch into APR")
    p.add_argument("source", help="a .safetensors file, sharded index, HF directory, .gguf, "
                   "PyTorch .pt/.pth/.bin (read without running pickle code), or a "
                   "Whisper directory (CTranslate2 model.bin, or Hugging Face config.json + "
                   "SafeTensors; both with tokenizer.json)")
    p.add_argument("-o", "--output", help="output .apr (default: $APR_CACHE/models/NAME.apr)")
    p.add_argument("--arch", help="architecture: " + ", ".join(architectures()))
    p.add_argument("--names", choices=["keep", "apr"], default="keep",
                   help="keep the source's tensor names (runnable) or use the canonical APR "
                        "names of seed 000 §10.8")
    p.add_argument("--quantize", metavar="TYPE|FILETYPE", help="quantize while importing")
    p.add_argument("--compress", help="lz4, zstd or zstd:LEVEL")
    p.add_argument("--sha256", help="refuse the source unless its sha256 matches")
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing output, and import despite failed checks "
                        "(unknown architecture or names, bad statistics)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_import)
