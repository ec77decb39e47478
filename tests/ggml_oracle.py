"""ggml's own C quantizers as a test oracle, through ctypes (test helper, never runtime code).

The library is `libggml-base` from an installed llama-cpp-python wheel (found without
importing `llama_cpp`), or the file named by the environment variable `APR_GGML_BASE_LIB`.

* `ggml_quantize(values, type_name) -> bytes` runs `ggml_quantize_chunk` with no importance
  matrix. For every type apr writes, that is ggml's `quantize_row_*_ref` (quantize_q*_K,
  quantize_q4_0 ... call the `_ref` row function when `quant_weights` is NULL; F16 and BF16
  go through `ggml_fp32_to_fp16_row` / `ggml_fp32_to_bf16_row_ref`, scalar RNE conversions).
* `ggml_dequantize(data, type_name, n) -> float32 [n]` runs the type traits' `to_float`.
* `available() -> bool` says whether the library could be loaded.
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from typing import Optional

import numpy as np

# ggml_type ids (ggml.h), the same numbers GGUF stores.
GGML_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30,
}

_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):
    """`struct ggml_type_traits` (ggml.h)."""

    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_lib: Optional[ctypes.CDLL] = None
_load_error: Optional[str] = None


def _find_library() -> Optional[str]:
    override = os.environ.get("APR_GGML_BASE_LIB")
    if override:
        return override
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for pattern in ("**/libggml-base.so*", "**/libggml-base.dylib", "**/ggml-base.dll"):
            hits = sorted(glob.glob(os.path.join(root, pattern), recursive=True))
            if hits:
                return hits[0]
    return None


def _load() -> Optional[ctypes.CDLL]:
    global _lib, _load_error
    if _lib is not None or _load_error is not None:
        return _lib
    path = _find_library()
    if path is None:
        _load_error = "llama-cpp-python (libggml-base) is not installed"
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        _load_error = "cannot load {}: {}".format(path, exc)
        return None
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    _lib = lib
    return lib


def available() -> bool:
    """True when the ggml library is loadable."""
    return _load() is not None


def unavailable_reason() -> str:
    _load()
    return _load_error or ""


def _require() -> ctypes.CDLL:
    lib = _load()
    if lib is None:
        raise RuntimeError(_load_error)
    return lib


def ggml_quantize(values: np.ndarray, type_name: str) -> bytes:
    """Quantize float32 rows [nrows, n_per_row] (or 1-D: one row) with ggml, no imatrix."""
    lib = _require()
    x = np.ascontiguousarray(values, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    nrows, n_per_row = x.shape
    type_id = GGML_TYPES[type_name]
    size = lib.ggml_row_size(type_id, n_per_row) * nrows
    out = np.zeros(size, dtype=np.uint8)
    written = lib.ggml_quantize_chunk(type_id, x.ctypes.data, out.ctypes.data, 0, nrows,
                                      n_per_row, None)
    if written != size:
        raise RuntimeError("ggml_quantize_chunk wrote {} bytes, expected {}".format(written, size))
    return out.tobytes()


def ggml_dequantize(data: bytes, type_name: str, n: int) -> np.ndarray:
    """Dequantize `n` elements of `type_name` with ggml's `to_float`; float32 [n]."""
    lib = _require()
    traits = lib.ggml_get_type_traits(GGML_TYPES[type_name]).contents
    if not traits.to_float:
        raise RuntimeError("ggml has no to_float for {}".format(type_name))
    src = np.frombuffer(bytes(data), dtype=np.uint8).copy()
    out = np.empty(n, dtype=np.float32)
    _TO_FLOAT(traits.to_float)(src.ctypes.data, out.ctypes.data, n)
    return out
