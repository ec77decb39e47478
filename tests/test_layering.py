"""House rules that are checkable: imports point one way down the layers (function-level
imports count) with no cycles, the format layer needs only the standard library, no
source file is over 400 lines, and apr_core stays Python 3.8 syntax (the browser's
Pyodide 0.17 runs 3.8)."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"apr_core": "apr_core", "apr_native": os.path.join("native", "apr_native")}
SHELL = os.path.join("web", "src")            # the browser shell's Python modules

# THE layer table, lowest first: a module may import modules of its own layer or of a
# lower one, never of a higher one. The longest matching prefix decides a module's layer.
LAYERS = [
    ("base", ["apr_core", "apr_core.errors", "apr_core.dtypes", "apr_core.io",
              "apr_core.tensor", "apr_core.atomic", "apr_core.json_files", "apr_core.hparams",
              "apr_core.integrity", "apr_core.refs",
              "apr_core.codecs",
              "apr_core.crypto"]),
    ("formats", ["apr_core.formats"]),           # read and write, no conversion
    ("quant", ["apr_core.quant"]),
    ("text", ["apr_core.text"]),
    ("model", ["apr_core.model", "apr_core.name_maps",   # the network
               "apr_core.gpu"]),                          # ... on a WebGPU device
    ("runtime", ["apr_core.runtime",            # text model, generation, sampling, batching
                 "apr_core.speech"]),            # Whisper: audio, mel, model, decoding
    ("orchestration", ["apr_core.conversion", "apr_core.stats", "apr_core.trace",
                       "apr_core.transforms"]),
    ("native", ["apr_native", "apr_native.kernels", "apr_native.backends",
                "apr_native.mmap_source", "apr_native.pickle_safe", "apr_native.real_models",
                "apr_native.config", "apr_native.web_root"]),
    ("engine", ["apr_native.engine", "apr_native.structured"]),
    ("server", ["apr_native.server", "apr_native.web_bundle", "apr_native.web_server"]),
    # the TUI is a CLI front end; apr compile's builders use web_bundle and cli's helpers
    ("cli", ["apr_native.cli", "apr_native.tui", "apr_native.compile"]),
    ("shell-source", ["apr_websource", "apr_webcrypto", "apr_webkernel", "apr_webhub",
                      "apr_webplace", "apr_webgpu"]),
    # generation; Whisper (speech page); the edge worker's Python that runs in Pyodide
    # over the shell's modules (apr compile copies it into the bundle as `apr_worker`)
    ("shell-run", ["apr_webrun", "apr_webspeech", "apr_websession", "apr_weblora"] +
     ["apr_native.compile.worker_bundle." + name
      for name in ("api", "js_entry", "placement", "store")]),
    ("shell", ["apr_web"]),
]


def source_modules():
    """{dotted module name: file path} for apr_core, apr_native and the shell's Python."""
    found = {}
    for package, directory in PACKAGES.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, directory)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    parts = os.path.relpath(path, os.path.join(ROOT, directory))[:-3].split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    found[".".join([package] + parts)] = path
    for name in os.listdir(os.path.join(ROOT, SHELL)):
        if name.endswith(".py"):
            found[name[:-3]] = os.path.join(ROOT, SHELL, name)
    return found


def _known(name, modules):
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module, source, modules):
    """The modules of `modules` that `module` imports anywhere in `source` (function-level
    imports too): `from p import m` counts as importing p, and p.m when that is a module."""
    is_package = modules[module].endswith("__init__.py")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
                if base not in modules:   # a relative import of nothing: report it
                    found.add("<missing {}>".format(base))
                    continue
            # `from p import m` runs p's __init__ too, so it imports p as well as p.m
            found.add(_known(base, modules))
            for alias in node.names:
                child = base + "." + alias.name
                if child in modules:
                    found.add(child)
    found.discard(None)
    found.discard(module)
    return found


def import_graph(extra_source=None):
    """{module: set of modules it imports}; `extra_source` {module: code} appends code to a
    module's source (how the tests below prove the checks can fail)."""
    modules = source_modules()
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        source += "\n" + (extra_source or {}).get(module, "")
        graph[module] = imports_of(module, source, modules)
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(module):
    if module.startswith("<missing"):
        return -1
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and \
                    (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def upward_imports(graph):
    """(importer, its layer, imported, its layer) for every import that points up."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target in graph and layer_of(target) > layer_of(module):
                out.append((module, LAYERS[layer_of(module)][0], target,
                            LAYERS[layer_of(target)][0]))
    return out


def test_relative_imports_name_real_modules():
    graph = import_graph()
    assert [(m, t) for m, ts in sorted(graph.items()) for t in ts if t.startswith("<")] == []


def test_every_module_has_a_layer():
    assert [m for m in source_modules() if layer_of(m) is None] == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_imports_point_down_the_layers():
    assert upward_imports(import_graph()) == []


@pytest.mark.parametrize("module,code,upward", [
    # the format layer reaching for the model (function level counts), and its cycle
    ("apr_core.formats.gguf", "def f():\n    from ..model import transformer\n", True),
    # the web shell's generation half calling back into apr_web
    ("apr_webrun", "import apr_web\n", True),
    # a tokenizer implementation importing the factory that imports it (same layer)
    ("apr_core.text.bpe", "from . import load\n", False),
])
def test_the_checks_fail_on_a_back_import(module, code, upward):
    graph = import_graph({module: code})
    assert any(module in cycle for cycle in cycles(graph))
    assert any(found[0] == module for found in upward_imports(graph)) is upward


def test_a_relative_import_of_nothing_is_reported():
    graph = import_graph({"apr_core.conversion.convert": "from .gguf import write_gguf\n"})
    assert "<missing apr_core.conversion.gguf>" in graph["apr_core.conversion.convert"]


def test_no_source_file_over_400_lines():
    long = []
    for top in ("apr_core", "native", "web/src", "bench", "examples", "scripts", "fuzz"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__")]
            for name in files:
                if name.endswith((".py", ".js", ".sh")):
                    with open(os.path.join(dirpath, name), encoding="utf-8") as handle:
                        count = sum(1 for _ in handle)
                    if count > 400:
                        long.append((os.path.relpath(os.path.join(dirpath, name), ROOT), count))
    assert long == []


# Modules that must import, and write/read a model, with numpy absent (Pyodide 314 offline).
FORMAT_LAYER = [
    "apr_core.errors", "apr_core.dtypes", "apr_core.io", "apr_core.tensor", "apr_core.atomic",
    "apr_core.codecs.framing", "apr_core.codecs.lz4", "apr_core.codecs.zstd",
    "apr_core.formats.detect", "apr_core.formats.open", "apr_core.formats.apr2",
    "apr_core.formats.shards", "apr_core.formats.gguf", "apr_core.formats.safetensors",
    "apr_core.formats.safetensors_index", "apr_core.formats.metadata",
    "apr_core.conversion.convert",
]

SCRIPT = """
import sys
for blocked in ("numpy", "lz4", "lz4.block", "zstandard"):
    sys.modules[blocked] = None          # importing them now raises ImportError
import importlib
for name in {modules!r}:
    importlib.import_module(name)
from apr_core import dtypes
from apr_core.tensor import RawTensor
from apr_core.formats.apr2 import write_apr2_bytes, read_apr2
t = RawTensor("w", dtypes.BY_NAME["F32"], (2, 3), bytes(range(24)))
data = write_apr2_bytes([t], {{"model_type": "test"}}, compression="lz4")
assert read_apr2(data).read_raw("w").data == t.data
import os, tempfile
from apr_core.conversion.convert import convert
from apr_core.formats.gguf import write_gguf
with tempfile.TemporaryDirectory() as tmp:
    write_gguf(os.path.join(tmp, "m.gguf"), [t], {{"general.architecture": "test"}})
    convert(os.path.join(tmp, "m.gguf"), os.path.join(tmp, "m.apr"), compression="lz4")
    convert(os.path.join(tmp, "m.apr"), os.path.join(tmp, "m.safetensors"))
    convert(os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "back.gguf"))
    with open(os.path.join(tmp, "m.gguf"), "rb") as a, open(os.path.join(tmp, "back.gguf"), "rb") as b:
        assert a.read() == b.read()
print("ok")
"""


def test_format_layer_imports_only_stdlib():
    code = SCRIPT.format(modules=FORMAT_LAYER)
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_apr_core_is_python38_syntax():
    vermin = shutil.which("vermin") or os.path.join(os.path.dirname(sys.executable), "vermin")
    if not os.path.exists(vermin):
        pytest.skip("vermin not installed (pip install vermin)")
    done = subprocess.run([vermin, "-t=3.8-", "--no-tips", "--violations",
                           "--eval-annotations=no", os.path.join(ROOT, "apr_core")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
