"""`apr compile MODEL --target worker -o DIR`: a Cloudflare Python Worker bundle that answers
OpenAI's `POST /v1/completions` with apr_core, the model read from an R2-style binding.

    report = build(path, "smollm2.worker")        # a directory; see worker_bundle/ for code

Layout of the directory:

    src/worker.py                the Python Worker (`Default(WorkerEntrypoint).fetch`)
    src/apr_worker/api.py        routes, request fields, errors (worker_bundle/api.py)
    src/apr_worker/store.py      R2 reads -> BytesSource -> THE engine (worker_bundle/store.py)
    src/apr_worker/openai_format.py   apr serve's response shapes (server/openai_format.py)
    src/apr_worker/manifest.json the model's object key, name, format, size and sha256,
                                 engine settings (dequantize, kv_memory), the apr version
    src/apr_core/...             apr_core (.py files and its data), vendored
    model/NAME                   the model file: the object to upload to R2 (a symbolic
                                 link to the file with --external, nothing copied)
    wrangler.toml, pyproject.toml    deployment: R2 binding MODEL, python_workers, numpy
    workerd/config.capnp         local runs in workerd (`make_config.py` writes it), with
    workerd/r2_disk.mjs          an R2-style MODEL binding over model/ and
    workerd/probe.mjs            a JavaScript probe of the bundle's bindings
    README.md                    how to run and deploy it

The directory is built beside the output under a temporary name and renamed into place.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Optional

from apr_core.errors import AprError, ErrorCode

from .pyz import apr_core_files, check_model

Progress = Callable[[int, int], None]        # (bytes done, bytes in all)
COPY_CHUNK = 8 << 20
WORKER_FORMAT = 1
DEFAULT_KV_MEMORY = 64 << 20
BUCKET = "apr-models"

_HERE = os.path.dirname(os.path.abspath(__file__))
_TEMPLATES = os.path.join(_HERE, "worker_bundle")
# bundle path -> source file, copied as they are
RUNNER_FILES = {
    "src/worker.py": os.path.join(_TEMPLATES, "entry.py"),
    "src/apr_worker/api.py": os.path.join(_TEMPLATES, "api.py"),
    "src/apr_worker/store.py": os.path.join(_TEMPLATES, "store.py"),
    # the JSON shapes `apr serve` answers with: stdlib + numpy, so they run in the worker
    "src/apr_worker/openai_format.py": os.path.join(os.path.dirname(_HERE), "server",
                                                    "openai_format.py"),
    "workerd/make_config.py": os.path.join(_TEMPLATES, "make_config.py"),
    "workerd/r2_disk.mjs": os.path.join(_TEMPLATES, "r2_disk.mjs"),
    "workerd/probe.mjs": os.path.join(_TEMPLATES, "probe.mjs"),
}
PACKAGE_INIT = '"""The apr worker: routes (api), model loading (store), response shapes."""\n'


def slug(name: str) -> str:
    """A worker name from a model file name: lowercase letters, digits and dashes."""
    stem = re.sub(r"\.(gguf|apr|safetensors)$", "", name.lower())
    return re.sub(r"[^a-z0-9]+", "-", stem).strip("-")[:50].strip("-") or "model"


def build(model_path: str, output: str, external: Optional[str] = None,
          overwrite: bool = False, progress: Optional[Progress] = None) -> Dict[str, Any]:
    """Write the worker bundle for the single model file `model_path` into the directory
    `output`. `external`: link the model instead of copying it (it is uploaded to R2 from
    wherever it is; the location is recorded). `progress(done, total)` follows the pass
    over the model's bytes. Returns the manifest's model entry and the size of each part."""
    from apr_native import __version__
    model = _check_model(model_path)
    if os.path.lexists(output) and not overwrite:
        raise AprError(ErrorCode.ARGUMENT, "output exists (use -f/--force to overwrite)",
                       path=output)
    model["key"] = model["name"]
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".apr-worker-", dir=parent)
    try:
        os.chmod(staging, _directory_mode())        # mkdtemp's 0700 -> as the umask allows
        parts = {"runner": 0, "apr_core": 0, "model": 0}
        for name, source in RUNNER_FILES.items():
            parts["runner"] += _copy(source, os.path.join(staging, name))
        parts["runner"] += _write(staging, "src/apr_worker/__init__.py", PACKAGE_INIT)
        for name, source in apr_core_files():
            parts["apr_core"] += _copy(source, os.path.join(staging, "src", name))
        target = os.path.join(staging, "model", model["name"])
        os.makedirs(os.path.dirname(target))
        if external is None:
            model["member"] = "model/" + model["name"]
            model["sha256"] = _copy_hashed(model_path, target, model["size"], progress)
            parts["model"] = model["size"]
        else:
            model["external"] = external
            os.symlink(os.path.abspath(model_path), target)
            model["sha256"] = _copy_hashed(model_path, None, model["size"], progress)
        manifest = {"worker_format": WORKER_FORMAT, "apr_version": __version__,
                    "model": model, "dequantize": True, "kv_memory": DEFAULT_KV_MEMORY}
        parts["runner"] += _write(staging, "src/apr_worker/manifest.json",
                                  json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        for name, text in deployment_files(model, slug(model["name"])).items():
            parts["runner"] += _write(staging, name, text)
        parts["runner"] += os.path.getsize(_make_config(staging))
        _replace(staging, output, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(parts.values())
    return {"output": output, "model": model, "parts": parts, "overhead": 0, "size": size,
            "target": "worker"}


def _check_model(path: str) -> Dict[str, Any]:
    """pyz's check (one file, with a tokenizer) and what it records; its advice to use
    --external does not apply here, since the worker always reads one object."""
    try:
        return check_model(path, embed=True)
    except AprError as err:
        if err.code is ErrorCode.UNSUPPORTED and "cannot be embedded" in err.message:
            raise AprError(ErrorCode.UNSUPPORTED, "the worker reads its model as one R2 "
                           "object: convert the model to one file first (apr convert)",
                           path=path) from None
        raise


def print_report(report: Dict[str, Any]) -> None:
    """The size of each part, the total, and how to run and deploy the bundle."""
    from apr_native.cli.common import human_bytes
    from apr_native.cli.render import print_table
    model, parts, out = report["model"], report["parts"], report["output"]
    rows = [("worker code and config (src/worker.py, src/apr_worker/, workerd/)",
             human_bytes(parts["runner"])),
            ("apr_core (src/apr_core/)", human_bytes(parts["apr_core"])),
            ("model " + (model.get("member") or "(linked: {})".format(model["external"])),
             human_bytes(parts["model"])),
            ("total", human_bytes(report["size"]))]
    print_table("wrote {}".format(out), ["part", "size"], rows, right=["size"])
    print("run it: cd {} && workerd serve workerd/config.capnp config --experimental"
          .format(out))
    print("deploy it: upload model/{} to the R2 bucket bound as MODEL, then pywrangler "
          "deploy (see {}/README.md)".format(model["name"], out))


def deployment_files(model: Dict[str, Any], name: str) -> Dict[str, str]:
    """wrangler.toml, pyproject.toml and README.md of the bundle."""
    from .worker_bundle.make_config import COMPATIBILITY_DATE
    key = model["key"]
    wrangler = WRANGLER.format(name=name, date=COMPATIBILITY_DATE, bucket=BUCKET, key=key)
    pyproject = PYPROJECT.format(name=name)
    readme = README.format(name=model["name"], key=key, bucket=BUCKET,
                           size=model["size"], sha256=model["sha256"])
    return {"wrangler.toml": wrangler, "pyproject.toml": pyproject, "README.md": readme}


WRANGLER = """\
# Cloudflare deployment of an apr worker bundle (apr compile --target worker).
name = "apr-{name}"
main = "src/worker.py"
compatibility_date = "{date}"
compatibility_flags = ["python_workers"]

# The model object: upload model/{key} to this bucket under the key "{key}".
[[r2_buckets]]
binding = "MODEL"
bucket_name = "{bucket}"

# apr_core's package data, read by Python as files
[[rules]]
type = "Data"
globs = ["**/*.json", "**/*.bin"]
fallthrough = true

# [vars]
# MODEL_KEY = "{key}"     # another object key than the one recorded at build time
"""

PYPROJECT = """\
# Python packages of the worker, vendored by `pywrangler sync` / `pywrangler deploy`
# (PyPI workers-py); apr_core itself is in src/.
[project]
name = "apr-worker-{name}"
version = "0.1.0"
requires-python = ">=3.12"
dependencies = ["numpy"]
"""

README = """\
# apr worker: {name}

A Cloudflare Python Worker built by `apr compile --target worker`. It answers

    POST /v1/completions   {{"prompt": "...", "max_tokens": 16, "temperature": 0, "stop": [...]}}
    GET  /v1/models

in OpenAI's shapes, with apr_core (src/apr_core) and numpy. The model is read once per
isolate from the R2 bucket bound as `MODEL`, object key `{key}` ({size} bytes, sha256
{sha256}; the worker refuses an object that differs).

## Deploy

    npx wrangler r2 bucket create {bucket}
    npx wrangler r2 object put {bucket}/{key} --file model/{key} --remote
    uvx --from workers-py pywrangler deploy       # vendors numpy (pyproject.toml), deploys

A Worker isolate has 128 MB of memory on Cloudflare's platform, so only models far
smaller than that fit there; `src/apr_worker/manifest.json` sets `dequantize` (float32
weights at load: faster, about 4x the memory of the file) and `kv_memory`.

## Run locally in workerd

    cd THIS_DIRECTORY
    workerd serve workerd/config.capnp config --experimental   # the Python worker, :8787
    workerd serve workerd/config.capnp probe     # the JavaScript probe: GET /v1/models

workerd fetches Cloudflare's Pyodide bundle when a Python worker starts, so offline it
stops with "Request for Pyodide bundle failed" unless that file is already in the
directory given by `--pyodide-bundle-disk-cache-dir`. The probe needs no Python: it checks
the config, the manifest and the MODEL binding (an R2-style binding over model/, see
workerd/r2_disk.mjs). After vendoring packages into python_modules/ or editing src/, run
`python3 workerd/make_config.py` to list them in the config again.
"""


def _directory_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def _write(root: str, name: str, text: str) -> int:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = text.encode("utf-8")
    with open(path, "wb") as handle:
        handle.write(data)
    return len(data)


def _copy(source: str, target: str) -> int:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    return os.path.getsize(target)


def _copy_hashed(source: str, target: Optional[str], size: int,
                 progress: Optional[Progress]) -> str:
    """Copy `source` to `target` (None: only read it); its sha256."""
    digest = hashlib.sha256()
    done = 0
    with open(source, "rb") as src:
        out = open(target, "wb") if target is not None else None
        try:
            for block in iter(lambda: src.read(COPY_CHUNK), b""):
                digest.update(block)
                if out is not None:
                    out.write(block)
                done += len(block)
                if progress is not None:
                    progress(done, size)
        finally:
            if out is not None:
                out.close()
    return digest.hexdigest()


def _make_config(bundle: str) -> str:
    """workerd/config.capnp, written by the code the bundle carries as make_config.py."""
    from .worker_bundle.make_config import write_config
    return write_config(bundle)


def _replace(staging: str, output: str, overwrite: bool) -> None:
    """Move the finished bundle to `output`; an existing output (with overwrite) is
    removed only once the new one is complete."""
    old = None
    if os.path.lexists(output):
        if not overwrite:
            raise AprError(ErrorCode.ARGUMENT, "output exists (use -f/--force to "
                           "overwrite)", path=output)
        old = staging + ".old"
        os.rename(output, old)
    os.rename(staging, output)
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old)
        else:
            os.unlink(old)


__all__ = ["build", "print_report", "slug", "deployment_files", "RUNNER_FILES"]
