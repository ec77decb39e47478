"""Weights of a loaded model: `Linear` projections that stay quantized in memory.

A `Linear` holds a weight `W [out, in]` as its stored bytes, dtype and shape. `matmul(x)`
computes `x @ W.T (+ b)` through its model's `Kernels` (kind "matmul", keyed by dtype
name), so an accelerated backend (numba, CUDA) can replace the numpy kernel without touching
the model. The numpy kernel decodes W a block of rows at a time with `dequantize_rows`, so its
scratch memory stays under `scratch_bytes` however large the weight: a model runs in about
its file size, never a full float32 copy of every weight. `dense=True` (or
`Transformer.from_model_file(..., dequantize_at_load=True)`) decodes once at load instead:
more memory, much faster per token with numpy alone.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import dtypes
from ..dtypes import DType
from ..errors import AprError, ErrorCode
from ..quant import dequantize, dequantize_rows, registry

# Scratch for one decoded block of rows: 4 MiB of float32 keeps a chunk of a large matrix
# within a few L2/L3-sized pieces while the BLAS call per chunk stays big enough that
# Python overhead does not dominate (the 49152 x 576 SmolLM2 head is 27 chunks).
SCRATCH_BYTES = 4 << 20


def numpy_matmul(data: np.ndarray, dtype: DType, shape: Tuple[int, int], x: np.ndarray,
                 scratch_elements: int) -> np.ndarray:
    """Kernel protocol for kind "matmul": `x [T, in] f32` times `W.T` -> `[T, out] f32`.

    `data` is the weight's bytes as a flat uint8 array, `shape` its `(out, in)`. At most
    `scratch_elements` decoded weights exist at a time.
    """
    out_dim, in_dim = shape
    y = np.empty((x.shape[0], out_dim), np.float32)                 # [T, out]
    step = max(1, min(out_dim, scratch_elements // max(in_dim, 1)))
    # One buffer for every block of rows: decoding into memory already touched is about
    # twice as fast as into fresh pages, and one kernel call per block beats many.
    scratch = np.empty(step * in_dim, np.float32)                   # [rows * in]
    for start in range(0, out_dim, step):
        stop = min(out_dim, start + step)
        w = dequantize_rows(data, dtype, shape, start, stop,
                            out=scratch[:(stop - start) * in_dim])  # [rows, in]
        # W x^T keeps W in its stored row-major order (a plain gemv when T == 1).
        y[:, start:stop] = np.dot(w, x.T).T                          # [T, in] -> [T, rows]
    return y


for _dtype in dtypes.ALL:
    # One generic kernel serves every dtype the dequantizers know; backends register
    # specialised ones per dtype under their own name.
    registry.register("matmul", _dtype.name)(numpy_matmul)


def matmul_group(linears: Sequence["Linear"], x: np.ndarray) -> List[np.ndarray]:
    """`[l.matmul(x) for l in linears]` for projections sharing one input (Q/K/V,
    gate/up), through the registry's kind "matmul_group": a backend may run them as one
    kernel call (one activation quantization, one parallel region). A LoRA-adapted
    projection (`model.lora.AdaptedLinear`) joins the group with its base weight, its
    low-rank terms added after."""
    bases = [getattr(lin, "base", lin) for lin in linears]
    ys = bases[0].kernels.lookup("matmul_group", "*")(bases, x)
    return [y if lin is base else lin.add_low_rank(x, y)
            for lin, base, y in zip(linears, bases, ys)]


def numpy_matmul_group(linears: Sequence["Linear"], x: np.ndarray) -> List[np.ndarray]:
    """Kernel protocol for kind "matmul_group": each projection on its own."""
    return [linear.matmul(x) for linear in linears]


registry.register("matmul_group", "*")(numpy_matmul_group)


class GroupedMatmul:
    """Kinds "matmul" (`self` is the kernel) and "matmul_group" (`group`) of a backend
    whose `run(weights, x)` takes several `(data, dtype, (out, in))` weights sharing one
    `x [T, in]` in one call (the browser shell's kernels, apr_native's simd build of them).
    Weights it cannot take (`usable` False, or decoded at load) go to numpy's kernels."""

    def usable(self, dtype: DType, shape: Tuple[int, int]) -> bool:
        raise NotImplementedError

    def run(self, weights: Sequence[Tuple[Any, DType, Tuple[int, int]]], x: np.ndarray
            ) -> List[np.ndarray]:
        raise NotImplementedError

    def __call__(self, data: Any, dtype: DType, shape: Tuple[int, int], x: np.ndarray,
                 scratch_elements: int) -> np.ndarray:
        if not self.usable(dtype, shape):
            return numpy_matmul(data, dtype, shape, x, scratch_elements)
        return self.run([(data, dtype, shape)], x)[0]

    def group(self, linears: Sequence["Linear"], x: np.ndarray) -> List[np.ndarray]:
        """Projections sharing `x` (q/k/v, gate/up) in one `run`."""
        if any(lin.weight is not None or not self.usable(lin.dtype, lin.shape)
               for lin in linears):
            return numpy_matmul_group(linears, x)   # dense or odd-sized: each on its own
        ys = self.run([(lin.data, lin.dtype, lin.shape) for lin in linears], x)
        return [y if lin.bias is None else y + lin.bias for lin, y in zip(linears, ys)]


class Linear:
    """`y = x @ W.T + b` for `W [out, in]` of any dtype, quantized or dense in memory."""

    def __init__(self, name: str, data: Any, dtype: DType, shape: Tuple[int, ...],
                 bias: Optional[np.ndarray] = None, dense: bool = False,
                 scratch_bytes: int = SCRATCH_BYTES,
                 kernels: Optional[registry.Kernels] = None) -> None:
        if len(shape) != 2:
            raise AprError(ErrorCode.VALIDATION, "a projection weight must be 2-D",
                           tensor=name, shape=shape)
        self.name = name
        self.kernels = kernels or registry.NUMPY   # the backend this weight runs on
        self.dtype = dtype
        self.shape = (int(shape[0]), int(shape[1]))
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        self.scratch_elements = max(1, scratch_bytes // 4)
        self.data: Optional[np.ndarray] = None
        self.weight: Optional[np.ndarray] = None
        if dense:
            self.weight = np.ascontiguousarray(dequantize(data, dtype, self.shape),
                                               np.float32)          # [out, in]
        elif getattr(data, "resident", False):
            # blocks a kernel backend holds in its own memory (the browser shell's): only
            # that backend's matmul and `rows(ids, row_bytes)` reach them
            self.data = data
        else:
            self.data = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) \
                else data.view(np.uint8).reshape(-1)

    @classmethod
    def from_dense(cls, name: str, weight: np.ndarray,
                   bias: Optional[np.ndarray] = None,
                   kernels: Optional[registry.Kernels] = None) -> "Linear":
        """A dense Linear over a float32 `[out, in]` array (e.g. an HF Conv1D transposed)."""
        weight = np.ascontiguousarray(weight, np.float32)
        return cls(name, weight, dtypes.BY_NAME["F32"], weight.shape, bias, dense=True,
                   kernels=kernels)

    @property
    def quantized_in_memory(self) -> bool:
        return self.weight is None

    @property
    def nbytes(self) -> int:
        """Bytes this weight holds (stored bytes, or the dense float32 array)."""
        held = self.data.nbytes if self.weight is None else self.weight.nbytes
        return int(held + (0 if self.bias is None else self.bias.nbytes))

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """`x [T, in]` -> `[T, out]` float32."""
        x = np.ascontiguousarray(x, np.float32)
        if self.weight is not None:
            y = x @ self.weight.T                                     # [T, in] -> [T, out]
        else:
            kernel = self.kernels.lookup("matmul", self.dtype.name)
            y = kernel(self.data, self.dtype, self.shape, x, self.scratch_elements)
        if self.bias is not None:
            y += self.bias
        return y

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of W as float32 `[len(ids), in]` (embedding lookup); only those rows'
        bytes are decoded."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if self.weight is not None:
            return self.weight[ids]
        out_dim, in_dim = self.shape
        row_bytes = self.dtype.nbytes((in_dim,))
        if getattr(self.data, "resident", False):
            picked = self.data.rows(ids, row_bytes)                  # [n, row_bytes]
        else:
            picked = self.data.reshape(out_dim, row_bytes)[ids]      # [n, row_bytes]
        return dequantize(picked, self.dtype, (ids.size, in_dim))     # [n, in]

    def __repr__(self) -> str:
        mode = "quantized" if self.weight is None else "dense"
        return "<Linear {} {} {} {}>".format(self.name, self.dtype.name, self.shape, mode)


__all__ = ["Linear", "numpy_matmul", "matmul_group", "SCRATCH_BYTES"]
