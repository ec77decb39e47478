"""Write `workerd/config.capnp` for a worker bundle: every file of the bundle's worker (all
but model/, workerd/ and the deployment files) becomes a module: `.mjs`/`.js` an ES module,
`.wasm` a precompiled wasm module, `.json` a JSON module, anything else a data module.

    python3 workerd/make_config.py [BUNDLE_DIR]       # default: this file's bundle

`apr compile --target worker` runs it once. Run from the bundle's directory (the model
folder is the relative path `model`), with no flags:

    npx workerd serve workerd/config.capnp            # the worker on 127.0.0.1:8787

`MODEL` is an R2-style binding over the files in `model/` (r2_disk.mjs), standing in for
the R2 bucket the worker has on Cloudflare; `API_KEY` (a text binding, commented out) makes
the worker ask for `Authorization: Bearer KEY`. Standard library only, Python 3.8+.

This file is apr_native/compile/worker_bundle/make_config.py; in the bundle it is
`workerd/make_config.py`.
"""
import os
import sys

COMPATIBILITY_DATE = "2025-05-05"     # FinalizationRegistry; no nodejs_compat (Pyodide's
ADDRESS = "127.0.0.1:8787"            # loader would take its Node path)
SKIP = ("model", "workerd", "wrangler.toml", "README.md")
KINDS = {".mjs": "esModule", ".js": "esModule", ".wasm": "wasm", ".json": "json"}
ENTRY = "worker.mjs"

HEADER = """\
# workerd config of an apr worker bundle, written by workerd/make_config.py.
# Run from the bundle's directory:  npx workerd serve workerd/config.capnp
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [(name = "main", worker = .aprWorker), .modelFiles],
  sockets = [(name = "http", address = "{address}", http = (), service = "main")],
  extensions = [.localR2],
);

# The model object: files under model/ (relative to where workerd runs), read through an
# R2-style binding (r2_disk.mjs) since workerd has no R2 of its own.
const modelFiles :Workerd.Service = (name = "model-files", disk = (path = "model"));

const localR2 :Workerd.Extension = (
  modules = [(name = "apr:r2-disk", esModule = embed "r2_disk.mjs", internal = true)],
);

const aprWorker :Workerd.Worker = (
  compatibilityDate = "{date}",
  bindings = [
    (name = "MODEL", wrapped = (moduleName = "apr:r2-disk",
                                innerBindings = [(name = "files", service = "model-files")])),
    # (name = "API_KEY", text = "a secret"),
  ],
  modules = [
"""


def module_files(bundle: str):
    """(module name, kind, path relative to workerd/) of the worker's files, entry first."""
    found = []
    for dirpath, dirnames, files in os.walk(bundle):
        rel_dir = os.path.relpath(dirpath, bundle).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if rel_dir + d not in SKIP)
        for name in sorted(files):
            rel = rel_dir + name
            if rel in SKIP or name.startswith("."):
                continue
            kind = KINDS.get(os.path.splitext(name)[1], "data")
            found.append((rel, kind, "../" + rel))
    found.sort(key=lambda item: (item[0] != ENTRY, item[0]))
    return found


def _quote(text: str) -> str:
    return '"{}"'.format(text.replace("\\", "\\\\").replace('"', '\\"'))


def config_text(bundle: str) -> str:
    lines = [HEADER.format(address=ADDRESS, date=COMPATIBILITY_DATE)]
    for name, kind, path in module_files(bundle):
        lines.append("    (name = {}, {} = embed {}),\n".format(_quote(name), kind, _quote(path)))
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
