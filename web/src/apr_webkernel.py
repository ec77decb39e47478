"""apr_core's "matmul" kernel on the shell's WebAssembly SIMD kernel (web/src/simd_kernel.js).

Pyodide's numpy has neither BLAS nor SIMD, so a float32 matvec runs near 1.4 GFLOP/s and
decode spends about 80% of its time there. This kernel keeps each weight, dequantized once
to float32, in the SIMD kernel's memory; a call copies `x` in and `y` out. It is registered
in `apr_core.quant.registry` as backend "wasm-simd", so the model code is unchanged.
"""
from __future__ import annotations

import json
import weakref
from typing import Any, Callable, Dict, List, Sequence, Tuple

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

BACKEND = "wasm-simd"
LANES = 16  # the kernel sums 4 x 4 float32 lanes per step: columns must be a multiple of 16


class WasmMatmul:
    """A registry "matmul" kernel: `(data, dtype, shape, x, scratch) -> y [T, out]`."""

    def __init__(self, kernel: Any, to_js: Callable[[Any], Any]) -> None:
        self._kernel = kernel
        self._to_js = to_js
        self._handles: Dict[int, Tuple[Any, int]] = {}  # id(data) -> (weakref, handle)

    def _handle(self, data: Any, dtype: Any, shape: Tuple[int, int]) -> int:
        import numpy as np
        from apr_core.quant.api import dequantize
        entry = self._handles.get(id(data))
        if entry is not None and entry[0]() is data:
            return entry[1]
        weight = np.ascontiguousarray(dequantize(data, dtype, shape), "<f4")  # [out, in]
        handle = int(self._kernel.upload(self._to_js(weight.tobytes())))
        self._handles[id(data)] = (weakref.ref(data), handle)
        return handle

    def __call__(self, data: Any, dtype: Any, shape: Tuple[int, int], x: Any,
                 scratch_elements: int) -> Any:
        from apr_core.model.weights import numpy_matmul
        if shape[1] % LANES:
            return numpy_matmul(data, dtype, shape, x, scratch_elements)
        return self.run([(data, dtype, shape)], x)[0]

    def run(self, weights: List[Tuple[Any, Any, Tuple[int, int]]], x: Any) -> List[Any]:
        """`x [T, in]` times each `(data, dtype, (out, in))` weight, in one kernel call."""
        import numpy as np
        x = np.ascontiguousarray(x, "<f4")                                # [T, in]
        tokens = x.shape[0]
        plan = [[self._handle(data, dtype, shape), shape[0]] for data, dtype, shape in weights]
        flat = np.array(self._kernel.matmulGroup(json.dumps(plan), x.shape[1],
                                                 self._to_js(x.tobytes()), tokens).to_py(),
                        np.float32)                                     # [sum(T * out)]
        out, start = [], 0
        for _, rows in plan:
            out.append(flat[start:start + tokens * rows].reshape(tokens, rows))  # [T, out]
            start += tokens * rows
        return out

    def group(self, linears: Sequence[Any], x: Any) -> List[Any]:
        """Registry kind "matmul_group": projections sharing `x` (q/k/v, gate/up)."""
        from apr_core.model.weights import numpy_matmul_group
        if any(lin.weight is not None or lin.shape[1] % LANES for lin in linears):
            return numpy_matmul_group(linears, x)  # dense or odd-sized: each on its own
        ys = self.run([(lin.data, lin.dtype, lin.shape) for lin in linears], x)
        return [y if lin.bias is None else y + lin.bias for lin, y in zip(linears, ys)]


def register_simd_matmul() -> bool:
    """Make the SIMD kernel apr_core's preferred "matmul" (when the worker created one)."""
    kernel = getattr(js, "aprSimd", None)
    if kernel is None:
        return False
    try:
        from pyodide.ffi import to_js  # type: ignore[import-not-found]  # Pyodide >= 0.21
    except ImportError:
        from pyodide import to_js  # type: ignore[import-not-found]  # Pyodide 0.17
    from apr_core import dtypes
    from apr_core.quant import registry
    matmul = WasmMatmul(kernel, to_js)
    for dtype in dtypes.ALL:
        registry.register("matmul", dtype.name, backend=BACKEND)(matmul)
    registry.register("matmul_group", "*", backend=BACKEND)(matmul.group)
    registry.set_backend(BACKEND)
    return True


__all__ = ["WasmMatmul", "register_simd_matmul", "BACKEND"]
