"""What the browser shell is served from: the `web/` tree, Pyodide copies, an apr_core wheel.

One table of mounts shared by `apr web`, the browser tests and `bench/browser.py`, so they
all serve the same site::

    site = prepare_site(out_dir, flavor="017")     # writes apr_core.whl and config.json
    server = StaticServer(site_mounts(out_dir, models_dir)).start()
"""
from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import shutil
import zipfile
from typing import Any, Dict, List, Optional

import apr_core
from apr_core.atomic import atomic_output
from .web_root import web_root  # noqa: F401  (re-exported: the server and builders use it)

WHEEL_NAME = "apr_core.whl"
# URL prefix -> path relative to the web/ directory (npm packages live in web/node_modules).
PYODIDE_DIRS = {"314": "node_modules/pyodide", "017": "node_modules/@pyodide/pyodide/dist"}
VENDOR_DIRS = {"/vendor/wllama/": "node_modules/@wllama/wllama/esm"}


def missing_runtime(flavor: str) -> Optional[str]:
    """None when the Pyodide copy for `flavor` is installed, else a one-line reason."""
    path = os.path.join(web_root(), PYODIDE_DIRS[flavor])
    marker = "pyodide.mjs" if flavor == "314" else "pyodide.js"
    if not os.path.isfile(os.path.join(path, marker)):
        return "Pyodide {} is not installed in {} (run scripts/setup_web.sh)".format(flavor, path)
    return None


def build_core_wheel(dest_dir: str) -> str:
    """A pure-Python wheel of `apr_core` (the package Pyodide and WASI import), written
    atomically; returns its path. Deterministic: same sources, same bytes."""
    package = os.path.dirname(os.path.abspath(apr_core.__file__))
    dist = "apr_core-{}.dist-info".format(apr_core.__version__)
    files: Dict[str, bytes] = {}
    for root, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(root, name)
            arc = os.path.relpath(full, os.path.dirname(package)).replace(os.sep, "/")
            with open(full, "rb") as handle:
                files[arc] = handle.read()
    files[dist + "/METADATA"] = ("Metadata-Version: 2.1\nName: apr-core\nVersion: {}\n"
                                 .format(apr_core.__version__)).encode()
    files[dist + "/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: apr_native.web_bundle\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("{},sha256={},{}".format(arc, digest, len(data)))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, WHEEL_NAME)
    with atomic_output(path) as handle, \
            zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arc, data in files.items():
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return path


def pyodide_wheels() -> Dict[str, List[str]]:
    """Extra wheels per Pyodide flavor that scripts/setup_web.sh cached (msgpack for 314)."""
    base = os.environ.get("APR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "apr")
    found = sorted(glob.glob(os.path.join(base, "web-wheels", "*pyemscripten*.whl")))
    return {"314": found} if found else {}


def prepare_site(site_dir: str, flavor: str = "017", models: Any = (),
                 extra: Optional[Dict[str, Any]] = None) -> str:
    """Write the wheel, the cached Pyodide wheels and `config.json` (what the demo page
    reads) into `site_dir`."""
    build_core_wheel(site_dir)
    wheels: Dict[str, List[str]] = {}
    for name, paths in pyodide_wheels().items():
        for path in paths:
            shutil.copy(path, site_dir)
            wheels.setdefault(name, []).append("site/" + os.path.basename(path))
    config = {"flavor": flavor, "wheelURL": "site/" + WHEEL_NAME, "models": list(models),
              "extraWheels": wheels}
    config.update(extra or {})
    with open(os.path.join(site_dir, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    return site_dir


def site_mounts(site_dir: str, models_dir: Optional[str] = None) -> Dict[str, str]:
    """URL prefix -> directory for everything the page loads (all from one origin)."""
    root = web_root()
    mounts = {"/": root, "/site/": site_dir}
    for flavor, rel in PYODIDE_DIRS.items():
        mounts["/pyodide/{}/".format(flavor)] = os.path.join(root, rel)
    for prefix, rel in VENDOR_DIRS.items():
        mounts[prefix] = os.path.join(root, rel)
    if models_dir:
        mounts["/models/"] = models_dir
    return mounts


__all__ = ["build_core_wheel", "prepare_site", "site_mounts", "web_root", "missing_runtime",
           "WHEEL_NAME", "PYODIDE_DIRS"]
