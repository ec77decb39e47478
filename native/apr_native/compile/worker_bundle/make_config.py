"""Write `workerd/config.capnp` for a worker bundle: every file under `src/` becomes a
module of the Python worker (`.py` a Python module, anything else a data module, which
Python reads as a file), and so does every file under `python_modules/` when a vendoring
step (`pywrangler sync`) has put packages there.

    python3 workerd/make_config.py [BUNDLE_DIR]       # default: this file's bundle

`apr compile --target worker` runs it once; run it again after changing `src/` or
vendoring packages. The config has two entry points, both serving 127.0.0.1:8787 and both
run from the bundle's directory (the model folder is the relative path `model`):

    workerd serve workerd/config.capnp config --experimental   the Python worker
    workerd serve workerd/config.capnp probe     the JavaScript probe (probe.mjs)

`MODEL` is an R2-style binding over the files in `model/` (r2_disk.mjs), standing in for
the R2 bucket the worker has on Cloudflare. Standard library only, Python 3.8+.

This file is apr_native/compile/worker_bundle/make_config.py; in the bundle it is
`workerd/make_config.py`.
"""
import os
import sys

COMPATIBILITY_DATE = "2026-11-01"
ADDRESS = "127.0.0.1:8787"
SOURCE_DIRS = (("src", ""), ("python_modules", "python_modules/"))   # (folder, name prefix)

HEADER = """\
# workerd config of an apr worker bundle, written by workerd/make_config.py.
# Run from the bundle's directory:
#   workerd serve workerd/config.capnp config --experimental   the Python worker on {address}
#   workerd serve workerd/config.capnp probe     the JavaScript probe on {address}
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [(name = "main", worker = .pythonWorker), .modelFiles],
  sockets = [(name = "http", address = "{address}", http = (), service = "main")],
  extensions = [.localR2],
);

const probe :Workerd.Config = (
  services = [(name = "main", worker = .probeWorker), .modelFiles],
  sockets = [(name = "http", address = "{address}", http = (), service = "main")],
  extensions = [.localR2],
);

# The model object: files under model/ (relative to where workerd runs), read through an
# R2-style binding (r2_disk.mjs) since workerd has no R2 of its own.
const modelFiles :Workerd.Service = (name = "model-files", disk = (path = "model"));

const localR2 :Workerd.Extension = (
  modules = [(name = "apr:r2-disk", esModule = embed "r2_disk.mjs", internal = true)],
);

const modelBinding :Workerd.Worker.Binding = (
  name = "MODEL",
  wrapped = (moduleName = "apr:r2-disk", innerBindings = [(name = "files", service = "model-files")]),
);

const probeWorker :Workerd.Worker = (
  modules = [(name = "probe", esModule = embed "probe.mjs")],
  compatibilityDate = "{date}",
  bindings = [.modelBinding, (name = "MANIFEST", json = embed "../src/apr_worker/manifest.json")],
);

const pythonWorker :Workerd.Worker = (
  compatibilityDate = "{date}",
  compatibilityFlags = ["python_workers"],
  bindings = [.modelBinding],
  modules = [
"""


def module_files(bundle: str):
    """(module name, path relative to workerd/) of every source file, entry point first."""
    found = []
    for folder, prefix in SOURCE_DIRS:
        root = os.path.join(bundle, folder)
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                found.append((prefix + rel, "../{}/{}".format(folder, rel)))
    found.sort(key=lambda item: (item[0] != "worker.py", item[0]))
    return found


def _quote(text: str) -> str:
    return '"{}"'.format(text.replace("\\", "\\\\").replace('"', '\\"'))


def config_text(bundle: str) -> str:
    lines = [HEADER.format(address=ADDRESS, date=COMPATIBILITY_DATE)]
    for name, path in module_files(bundle):
        kind = "pythonModule" if name.endswith(".py") else "data"
        lines.append("    (name = {}, {} = embed {}),\n".format(_quote(name), kind,
                                                               _quote(path)))
    lines.append("  ],\n);\n")
    return "".join(lines)


def write_config(bundle: str) -> str:
    """Write `bundle/workerd/config.capnp`; returns its path."""
    path = os.path.join(bundle, "workerd", "config.capnp")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(config_text(bundle))
    os.replace(path + ".tmp", path)
    return path


if __name__ == "__main__":
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(write_config(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else here))
