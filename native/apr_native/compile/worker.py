"""`apr compile MODEL --target worker -o DIR`: a JavaScript module worker (workerd, Cloudflare
Workers) that boots an embedded Pyodide and answers OpenAI's API with apr_core, the model read
from an R2-style binding.

    report = build(path, "smollm2.worker")        # a directory; see worker_bundle/ for code

Layout of the directory (every file but model/, workerd/ and the deployment files is a
module of the worker):

    worker.mjs, boot.mjs         the entry point and the Pyodide boot (worker_bundle/)
    pyodide_modules.mjs, pyodide/    Pyodide 0.17 + numpy as precompiled modules
                                 (worker_bundle/pyodide_assets.py)
    simd_kernel.js, kernel_jobs.js, kernels/   the browser shell's SIMD block kernels
                                 (web/src), their wasm precompiled as kernels/*.wasm
    python.zip                   apr_core, apr_worker (api, store, js_entry, openai_format,
                                 manifest.json) and the shell's kernel glue (web/src/*.py)
    model/NAME                   the model file: the object to upload to R2 (a symbolic
                                 link to the file with --external, nothing copied)
    wrangler.toml, README.md     deployment: R2 binding MODEL (`wrangler deploy`)
    workerd/config.capnp         local runs in workerd (`make_config.py` writes it), with
    workerd/r2_disk.mjs          an R2-style MODEL binding over model/

The directory is built beside the output under a temporary name and renamed into place.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Optional, Tuple

from apr_core.errors import AprError, ErrorCode

from .pyz import apr_core_files, check_model

Progress = Callable[[int, int], None]        # (bytes done, bytes in all)
COPY_CHUNK = 8 << 20
WORKER_FORMAT = 1
DEFAULT_KV_MEMORY = 16 << 20       # KV blocks in Python's heap: ~700 positions of SmolLM2-135M
BUCKET = "apr-models"

_HERE = os.path.dirname(os.path.abspath(__file__))
_TEMPLATES = os.path.join(_HERE, "worker_bundle")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
WEB_SRC = os.path.join(_ROOT, "web", "src")
PYODIDE_DIST = os.path.join(_ROOT, "web", "node_modules", "@pyodide", "pyodide", "dist")
# bundle path -> source file, copied as they are
RUNNER_FILES = {
    "worker.mjs": os.path.join(_TEMPLATES, "worker.mjs"),
    "boot.mjs": os.path.join(_TEMPLATES, "boot.mjs"),
    "simd_kernel.js": os.path.join(WEB_SRC, "simd_kernel.js"),
    "kernel_jobs.js": os.path.join(WEB_SRC, "kernel_jobs.js"),
    "kernels/fused.js": os.path.join(WEB_SRC, "kernels", "fused.js"),
    "kernels/matmul_f32.wasm.js": os.path.join(WEB_SRC, "kernels", "matmul_f32.wasm.js"),
    "kernels/matmul_k.wasm.js": os.path.join(WEB_SRC, "kernels", "matmul_k.wasm.js"),
    "kernels/matmul_r.wasm.js": os.path.join(WEB_SRC, "kernels", "matmul_r.wasm.js"),
    "kernels/attend_f32.wasm.js": os.path.join(WEB_SRC, "kernels", "attend_f32.wasm.js"),
    "workerd/make_config.py": os.path.join(_TEMPLATES, "make_config.py"),
    "workerd/r2_disk.mjs": os.path.join(_TEMPLATES, "r2_disk.mjs"),
}
# python.zip member -> source file
PYTHON_FILES = {
    "apr_worker/api.py": os.path.join(_TEMPLATES, "api.py"),
    "apr_worker/store.py": os.path.join(_TEMPLATES, "store.py"),
    "apr_worker/js_entry.py": os.path.join(_TEMPLATES, "js_entry.py"),
    "apr_worker/placement.py": os.path.join(_TEMPLATES, "placement.py"),
    # the JSON shapes `apr serve` answers with: stdlib + numpy, so they run in the worker
    "apr_worker/openai_format.py": os.path.join(os.path.dirname(_HERE), "server",
                                                "openai_format.py"),
    # the browser shell's kernel glue: the SIMD kernels as apr_core's backend, placement
    "apr_webkernel.py": os.path.join(WEB_SRC, "apr_webkernel.py"),
    "apr_websource.py": os.path.join(WEB_SRC, "apr_websource.py"),
    "apr_webplace.py": os.path.join(WEB_SRC, "apr_webplace.py"),
}
KERNEL_WASM = ("matmul_f32", "matmul_k")   # precompiled: workerd compiles no wasm from bytes
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
        parts = {"runner": 0, "apr_core": 0, "model": 0, "pyodide": 0}
        for name, source in RUNNER_FILES.items():
            parts["runner"] += _copy(source, os.path.join(staging, name))
        parts["runner"] += _kernel_modules(staging)
        parts["pyodide"] = _pyodide(staging)
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
        sizes = _python_zip(staging, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        parts["runner"] += sizes[0]
        parts["apr_core"] += sizes[1]
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


def _kernel_modules(bundle: str) -> int:
    """kernels/NAME.wasm: the single-thread binaries embedded in web/src/kernels/NAME.wasm.js."""
    total = 0
    for name in KERNEL_WASM:
        with open(os.path.join(WEB_SRC, "kernels", name + ".wasm.js"), encoding="utf-8") as src:
            match = re.search(r'export const wasmBase64 = "([^"]+)"', src.read())
        if match is None:
            raise AprError(ErrorCode.IO, "no wasmBase64 in the kernel module", kernel=name)
        data = base64.b64decode(match.group(1))
        with open(os.path.join(bundle, "kernels", name + ".wasm"), "wb") as out:
            out.write(data)
        total += len(data)
    return total


def _pyodide(bundle: str) -> int:
    """pyodide/ and pyodide_modules.mjs from the npm Pyodide 0.17 distribution."""
    from .worker_bundle.pyodide_assets import write_assets
    if not os.path.isfile(os.path.join(PYODIDE_DIST, "pyodide.asm.wasm")):
        raise AprError(ErrorCode.IO, "the worker embeds npm @pyodide/pyodide 0.17, which is "
                       "not installed: run scripts/setup_web.sh", path=PYODIDE_DIST)
    return int(write_assets(PYODIDE_DIST, bundle)["bytes"])


def _python_zip(bundle: str, manifest: str) -> Tuple[int, int]:
    """python.zip: the worker's Python (apr_worker, the shell's glue) and apr_core; returns
    (bytes of the worker's files, bytes of apr_core's), uncompressed."""
    import zipfile
    mine = theirs = 0
    with zipfile.ZipFile(os.path.join(bundle, "python.zip"), "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("apr_worker/__init__.py", PACKAGE_INIT)
        out.writestr("apr_worker/manifest.json", manifest)
        mine += len(PACKAGE_INIT) + len(manifest)
        for name, source in PYTHON_FILES.items():
            out.write(source, name)
            mine += os.path.getsize(source)
        for name, source in apr_core_files():
            out.write(source, name)
            theirs += os.path.getsize(source)
    return mine, theirs


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
    rows = [("worker code, kernels and config (worker.mjs, kernels/, workerd/)",
             human_bytes(parts["runner"])),
            ("Pyodide 0.17 + numpy (pyodide/)", human_bytes(parts["pyodide"])),
            ("apr_core (in python.zip, uncompressed)", human_bytes(parts["apr_core"])),
            ("model " + (model.get("member") or "(linked: {})".format(model["external"])),
             human_bytes(parts["model"])),
            ("total", human_bytes(report["size"]))]
    print_table("wrote {}".format(out), ["part", "size"], rows, right=["size"])
    print("run it: cd {} && npx workerd serve workerd/config.capnp".format(out))
    print("deploy it: upload model/{} to the R2 bucket bound as MODEL, then npx wrangler "
          "deploy (see {}/README.md)".format(model["name"], out))


def deployment_files(model: Dict[str, Any], name: str) -> Dict[str, str]:
    """wrangler.toml and README.md of the bundle."""
    from .worker_bundle.make_config import COMPATIBILITY_DATE
    key = model["key"]
    wrangler = WRANGLER.format(name=name, date=COMPATIBILITY_DATE, bucket=BUCKET, key=key)
    readme = README.format(name=model["name"], key=key, bucket=BUCKET,
                           size=model["size"], sha256=model["sha256"])
    return {"wrangler.toml": wrangler, "README.md": readme}


WRANGLER = """\
# Cloudflare deployment of an apr worker bundle (apr compile --target worker): an ordinary
# JavaScript Worker that carries its own Pyodide (not a Python Worker).
name = "apr-{name}"
main = "worker.mjs"
compatibility_date = "{date}"

# The model object: upload model/{key} to this bucket under the key "{key}".
[[r2_buckets]]
binding = "MODEL"
bucket_name = "{bucket}"

# Pyodide's runtime, numpy's libraries and the kernels: precompiled wasm modules;
# its file systems and python.zip: data modules
[[rules]]
type = "CompiledWasm"
globs = ["**/*.wasm"]
fallthrough = true

[[rules]]
type = "Data"
globs = ["**/*.data", "**/*.zip"]
fallthrough = true

# [vars]
# MODEL_KEY = "{key}"     # another object key than the one recorded at build time
# API_KEY: `npx wrangler secret put API_KEY` makes the worker ask for Authorization: Bearer KEY
"""

README = """\
# apr worker: {name}

A JavaScript module Worker built by `apr compile --target worker`: it boots Pyodide 0.17
(Python 3.8 + numpy, embedded as precompiled modules under pyodide/) and runs apr_core
(python.zip) with the browser shell's SIMD block kernels (kernels/). It answers, in
OpenAI's shapes:

    GET  /v1/models
    POST /v1/completions        {{"prompt": "...", "max_tokens": 16, "temperature": 0, "stop": [...]}}
    POST /v1/chat/completions   {{"messages": [...], "stream": true, ...}}
    GET  /health

The model is read once per isolate from the R2 bucket bound as `MODEL`, object key `{key}`
({size} bytes, sha256 {sha256}; the worker refuses an object that differs). With an
`API_KEY` secret bound, requests need `Authorization: Bearer <key>`.

## Run locally in workerd (no network needed)

    cd THIS_DIRECTORY
    npx workerd serve workerd/config.capnp      # http://127.0.0.1:8787

`MODEL` is then an R2-style binding over model/ (workerd/r2_disk.mjs). After editing the
bundle's files, run `python3 workerd/make_config.py` to list them in the config again.

## Deploy

    npx wrangler r2 bucket create {bucket}
    npx wrangler r2 object put {bucket}/{key} --file model/{key} --remote
    npx wrangler deploy

A Worker isolate has 128 MB of memory on Cloudflare's platform; Pyodide and numpy alone
take a large part of it, so only models far smaller than that fit there.
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
