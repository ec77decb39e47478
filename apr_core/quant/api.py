"""Public quantization API: bytes of any supported dtype <-> float32 arrays.

    dequantize(data, dtype, shape)                     -> float32 array of `shape`
    dequantize_raw(raw_tensor)                         -> float32 array of raw.shape
    dequantize_rows(data, dtype, shape, start, stop[, out]) -> float32 [stop - start, shape[-1]]
    quantize(values, dtype)                            -> bytes
    supported_types(kind)                              -> names with a registered kernel

Shapes are row-major (outermost first); the innermost dimension of a block type must hold
whole blocks. Kernels come from `registry` (house rule 1: nothing here branches on dtype)
and are called on chunks of about `CHUNK_ELEMENTS` elements, so their scratch arrays stay
in cache and peak memory is the output plus one chunk of scratch.

Kernel protocol beyond the registry's `kernel(blocks) -> values`, all optional attributes:
`fills_out = True`: it also accepts `out=` (a float32 `[n_blocks, block_size]` slice of the
result) and writes into it; `whole_tensor = True`: it allocates nothing but its result and
is called once on the whole tensor (F32's kernel returns a zero-copy view);
`chunk_elements = k`: call it on about k elements at a time instead of `CHUNK_ELEMENTS`.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from ..dtypes import DType, by_name
from ..errors import AprError, ErrorCode
from ..tensor import RawTensor
from .registry import lookup, supported

# 128 Ki elements per kernel call (measured, bench/quant.py): kernels write float32
# straight into the result and keep only byte-sized scratch (~128-512 KiB per chunk), which
# stays in L2 and is reused by malloc; smaller chunks pay numpy's per-call overhead (a
# kernel makes 10-30 numpy calls), larger ones page-fault fresh scratch on every call.
CHUNK_ELEMENTS = 1 << 17

DTypeLike = Union[DType, str]
Kernel = Callable[..., Any]


def _as_dtype(dtype: DTypeLike) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return by_name(dtype)
    raise AprError(ErrorCode.ARGUMENT, "dtype must be a DType or a dtype name", dtype=dtype)


def _as_shape(shape: Any, dtype: DType) -> Tuple[int, ...]:
    """Normalise `shape` (ints, numpy ints or a single int) and check whole blocks."""
    try:
        dims = (operator.index(shape),) if not hasattr(shape, "__iter__") else \
            tuple(operator.index(dim) for dim in shape)
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "shape must be a sequence of integers",
                       shape=shape, dtype=dtype.name)
    if any(dim < 0 for dim in dims):
        raise AprError(ErrorCode.ARGUMENT, "shape dimensions must be non-negative",
                       shape=dims, dtype=dtype.name)
    if dtype.quantized and not dims:
        raise AprError(ErrorCode.FORMAT, "a block-quantized tensor needs at least one dimension",
                       dtype=dtype.name, block_size=dtype.block_size)
    dtype.nbytes(dims)  # AprError(FORMAT) when the innermost dim is not whole blocks
    return dims


def _as_bytes(data: Any) -> np.ndarray:
    """A flat uint8 view of `data` (bytes-like or a numpy array), copying only if needed."""
    try:
        if isinstance(data, np.ndarray):
            # ascontiguousarray is a no-op for contiguous input; the view reinterprets bytes
            return np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        return np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError, BufferError) as exc:
        raise AprError(ErrorCode.ARGUMENT, "data must be bytes-like or a numpy array",
                       type=type(data).__name__, reason=str(exc))


def _checked_bytes(data: Any, dtype: DType, dims: Tuple[int, ...]) -> np.ndarray:
    buf = _as_bytes(data)
    expected = dtype.nbytes(dims)
    if buf.size != expected:
        raise AprError(ErrorCode.CORRUPT, "data size does not match dtype and shape",
                       dtype=dtype.name, shape=dims, expected=expected, got=int(buf.size))
    return buf


def _chunk_blocks(dtype: DType, kernel: Kernel) -> int:
    """Blocks per kernel call: the kernel's `chunk_elements`, else `CHUNK_ELEMENTS`."""
    elements = getattr(kernel, "chunk_elements", CHUNK_ELEMENTS)
    return max(1, elements // dtype.block_size)


def _kernel_result(result: Any, count: int, width: int, dtype: DType, kind: str,
                   out_dtype: Any) -> np.ndarray:
    """A kernel's result as `[count, width]` of `out_dtype`, or AprError(VALIDATION)."""
    result = np.asarray(result)
    if result.dtype != out_dtype or result.size != count * width:
        raise AprError(ErrorCode.VALIDATION, "{} kernel returned the wrong shape or dtype"
                       .format(kind), dtype=dtype.name, expected=(count, width),
                       got_shape=result.shape, got_dtype=str(result.dtype))
    return result.reshape(count, width)


def _dequantize_blocks(blocks: np.ndarray, dtype: DType) -> np.ndarray:
    """`[n, type_size]` uint8 -> `[n, block_size]` float32 through the registered kernel."""
    n, width = blocks.shape[0], dtype.block_size
    if n == 0:
        return np.zeros((0, width), np.float32)
    kernel = reference_kernel("dequantize", dtype.name)
    # Corrupt scales (inf/NaN f16 fields) legitimately give NaN, as in ggml: no warnings.
    with np.errstate(invalid="ignore", over="ignore"):
        return _run_dequantize(kernel, blocks, dtype)


def _run_dequantize(kernel: Kernel, blocks: np.ndarray, dtype: DType,
                    out: Optional[np.ndarray] = None) -> np.ndarray:
    n, width = blocks.shape[0], dtype.block_size
    step = _chunk_blocks(dtype, kernel)
    fills_out = getattr(kernel, "fills_out", False)
    if out is None and (n <= step or getattr(kernel, "whole_tensor", False)):
        return _kernel_result(kernel(blocks), n, width, dtype, "dequantize", np.float32)
    if out is None:
        out = np.empty((n, width), np.float32)
    elif fills_out and not hasattr(kernel, "chunk_elements"):
        # The caller owns (and reuses) the destination, so there is no fresh scratch to
        # page-fault: one call over the whole range beats many small ones.
        step = n
    for start in range(0, n, step):
        stop = min(n, start + step)
        if fills_out:
            kernel(blocks[start:stop], out=out[start:stop])
        else:
            out[start:stop] = _kernel_result(kernel(blocks[start:stop]), stop - start, width,
                                             dtype, "dequantize", np.float32)
    return out


def dequantize(data: Any, dtype: DTypeLike, shape: Any) -> np.ndarray:
    """Decode `data` (bytes, memoryview or uint8 array) of `dtype` to float32 of `shape`.

    Bit-identical to ggml's `dequantize_row_*` (and gguf-py) for every supported type.
    Raises AprError: FORMAT if the innermost dimension is not whole blocks, CORRUPT if
    `len(data) != dtype.nbytes(shape)`, UNSUPPORTED if no kernel handles `dtype`.
    For F32 the result may be a view of `data` (read-only when `data` is bytes); every
    other type returns a new array.
    """
    dt = _as_dtype(dtype)
    dims = _as_shape(shape, dt)
    buf = _checked_bytes(data, dt, dims)
    blocks = buf.reshape(-1, dt.type_size)  # [n_blocks, type_size]
    return _dequantize_blocks(blocks, dt).reshape(dims)


def dequantize_raw(raw: RawTensor) -> np.ndarray:
    """`dequantize(raw.data, raw.dtype, raw.shape)`."""
    return dequantize(raw.data, raw.dtype, raw.shape)


def dequantize_rows(data: Any, dtype: DTypeLike, shape: Any, start_row: int,
                    end_row: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Rows `[start_row, end_row)` of the tensor, as float32 `[end_row - start_row, shape[-1]]`.

    A row is one innermost-dimension run (the tensor viewed as `[prod(shape[:-1]),
    shape[-1]]`). Only those rows' bytes are decoded, so a caller can walk a large
    weight in bounded memory; `data` is the whole tensor's bytes (a memoryview of an
    mmap costs nothing to pass). `out`, a C-contiguous float32 array of exactly that many
    elements, receives the rows (and is returned reshaped): a caller walking a weight
    reuses one buffer instead of allocating per block of rows.
    """
    dt = _as_dtype(dtype)
    dims = _as_shape(shape, dt)
    buf = _checked_bytes(data, dt, dims)
    inner = dims[-1] if dims else 1
    rows = 1
    for dim in dims[:-1]:
        rows *= dim
    try:
        start, stop = operator.index(start_row), operator.index(end_row)
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "row bounds must be integers",
                       start_row=start_row, end_row=end_row)
    if not 0 <= start <= stop <= rows:
        raise AprError(ErrorCode.ARGUMENT, "row range outside the tensor",
                       start_row=start, end_row=stop, rows=rows, dtype=dt.name)
    if not inner:
        return np.zeros((stop - start, 0), np.float32)
    row_bytes = inner // dt.block_size * dt.type_size
    part = buf[start * row_bytes:stop * row_bytes].reshape(-1, dt.type_size)
    if out is None:
        return _dequantize_blocks(part, dt).reshape(stop - start, inner)
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.flags.c_contiguous
            and out.size == (stop - start) * inner):
        raise AprError(ErrorCode.ARGUMENT, "out must be a C-contiguous float32 array of the "
                       "rows' size", expected=(stop - start) * inner,
                       got=getattr(out, "shape", None))
    blocks_out = out.reshape(-1, dt.block_size)                 # [n_blocks, block_size]
    if part.shape[0]:
        kernel = reference_kernel("dequantize", dt.name)
        with np.errstate(invalid="ignore", over="ignore"):
            _run_dequantize(kernel, part, dt, blocks_out)
    return out.reshape(stop - start, inner)


def quantize(values: Any, dtype: DTypeLike) -> bytes:
    """Encode float values (any shape; innermost dim whole blocks) as `dtype` bytes.

    The values are converted to float32, cut into `[n_blocks, block_size]` and handed to
    the registered quantize kernel chunk by chunk. Raises AprError: FORMAT for partial
    blocks, UNSUPPORTED if no quantize kernel handles `dtype`.
    """
    dt = _as_dtype(dtype)
    array = np.ascontiguousarray(values, dtype=np.float32)
    _as_shape(array.shape, dt)  # AprError(FORMAT) for partial blocks
    n, width = array.size // dt.block_size, dt.type_size
    kernel = reference_kernel("quantize", dt.name)
    if n == 0:
        return b""
    blocks = array.reshape(n, dt.block_size)                   # [n_blocks, block_size]
    out = np.empty((n, width), np.uint8)                       # [n_blocks, type_size]
    step = _chunk_blocks(dt, kernel)
    for start in range(0, n, step):
        stop = min(n, start + step)
        result = np.asarray(kernel(blocks[start:stop]))
        if result.dtype != np.uint8:
            result = np.ascontiguousarray(result).view(np.uint8)
        out[start:stop] = _kernel_result(result, stop - start, width, dt, "quantize",
                                         np.uint8)
    return out.tobytes()


def supported_types(kind: str = "dequantize") -> Tuple[str, ...]:
    """Names of the dtypes with a registered `kind` ("dequantize" or "quantize") kernel."""
    _load_kernels()
    return supported(kind)


def _load_kernels() -> None:
    # Imported on first use (they register themselves); keeps `import apr_core.quant` cheap.
    from .kernels import MODULES  # noqa: F401


def reference_kernel(kind: str, dtype_name: str) -> Kernel:
    """The numpy kernel of `kind` ("dequantize" / "quantize") for a dtype."""
    _load_kernels()
    return lookup(kind, dtype_name)


__all__ = ["dequantize", "dequantize_raw", "dequantize_rows", "quantize", "supported_types", "reference_kernel",
           "CHUNK_ELEMENTS"]
