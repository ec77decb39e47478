"""A model assembled from tensors in memory or on loaders, readable like any file.

    ModelView(metadata, tensors)       a ModelFile over LazyTensor/RawTensor objects
    floats(tensor)                     float32 values of any tensor (dequantized)
    encoded(name, values, like)        a LazyTensor holding `values` in `like`'s dtype

`convert()` accepts any ModelFile, so a view is written to APR, GGUF or SafeTensors (with
quantization, compression, sharding) by the same code as a file on disk.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable

import numpy as np

from .. import dtypes
from ..errors import AprError, ErrorCode
from ..tensor import LazyTensor, ModelFile, TensorInfo

# Float storage a transformed tensor can be re-encoded in; anything else becomes F32.
_ENCODABLE = ("F32", "F16", "BF16")


class ModelView(ModelFile):
    """A ModelFile whose tensors are objects with name/dtype/shape/load()."""

    format = "view"

    def __init__(self, metadata: Dict[str, Any], tensors: Iterable[Any]) -> None:
        super().__init__()
        self.metadata = dict(metadata)
        self._items: Dict[str, Any] = {}
        for tensor in tensors:
            if tensor.name in self._items:
                raise AprError(ErrorCode.VALIDATION, "duplicate tensor name", tensor=tensor.name)
            self._items[tensor.name] = tensor
            self.tensors[tensor.name] = TensorInfo(tensor.name, tensor.dtype,
                                                   tuple(tensor.shape), 0,
                                                   tensor.dtype.nbytes(tuple(tensor.shape)))

    def _read_payload(self, info: TensorInfo) -> bytes:
        return bytes(self._items[info.name].load())

    def lazy(self, name: str) -> LazyTensor:
        item = self._items[self.info(name).name]
        return LazyTensor(item.name, item.dtype, tuple(item.shape), item.load)


def floats(tensor: Any) -> np.ndarray:
    """`tensor` (name/dtype/shape/load) as float32 `[*shape]`."""
    from ..quant import dequantize
    return dequantize(tensor.load(), tensor.dtype, tuple(tensor.shape))


def encode(values: np.ndarray, dtype_name: str) -> bytes:
    """float values -> bytes of `dtype_name` (F32 directly, the rest via quant.quantize)."""
    if dtype_name == "F32":
        return np.ascontiguousarray(values, dtype="<f4").tobytes()
    from ..quant import quantize
    return quantize(np.ascontiguousarray(values, dtype=np.float32), dtype_name)


def storage_type(dtype: Any, shape: Any) -> str:
    """The dtype a transformed copy of a `dtype` tensor is written in: the same float or
    block type when it can be re-encoded (and the rows still hold whole blocks), else F32."""
    from ..quant import supported_types
    name = dtype.name
    if name in _ENCODABLE:
        return name
    if dtype.quantized and name in supported_types("quantize") and shape and \
            shape[-1] % dtype.block_size == 0:
        return name
    return "F32"


def derived(name: str, dtype_name: str, shape: Any, compute: Callable[[], np.ndarray]
            ) -> LazyTensor:
    """A tensor whose float values `compute()` makes when a writer loads it, encoded as
    `dtype_name`: one derived tensor is alive at a time, never the whole model."""
    shape = tuple(int(d) for d in shape)

    def load() -> bytes:
        values = compute()
        if tuple(values.shape) != shape:
            raise AprError(ErrorCode.VALIDATION, "transform produced the wrong shape",
                           tensor=name, expected=shape, got=tuple(values.shape))
        return encode(values, dtype_name)
    return LazyTensor(name, dtypes.by_name(dtype_name), shape, load)


def transformable(name: str, shape: Any) -> bool:
    """2-D+ weight matrices other than norms and the token embedding (llama.cpp's
    quantizable set, in either naming): what pruning and factorization touch."""
    from ..quant.recipes import category, gguf_name, quantizable
    gguf = gguf_name(name)
    return quantizable(gguf, tuple(shape)) and category(gguf) != "token_embd" and \
        "embed" not in name


__all__ = ["ModelView", "floats", "encode", "derived", "storage_type", "transformable"]
