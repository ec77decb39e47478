"""House rules that are checkable: the format layer needs only the standard library, and
apr_core stays Python 3.8 syntax (the browser's Pyodide 0.17 runs 3.8)."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
