"""Format-independent tensor descriptions and the common reader interface.

Every format reader (APR v2, GGUF, SafeTensors, sharded variants) returns a `ModelFile`:
metadata, an ordered name -> `TensorInfo` map, and `read_raw(name)` giving the stored bytes
of one tensor in row-major order. Writers take any sequence of objects with `name`,
`dtype`, `shape` and `load()` (a `RawTensor`, or `ModelFile.lazy(name)` to stream a tensor
from another file without holding the whole model in memory).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from .dtypes import DType
from .errors import AprError, ErrorCode
from .io import ByteSource

MAX_DIMS = 8


class TensorInfo(NamedTuple):
    """Where one tensor lives. `shape` is row-major (outermost first)."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    offset: int          # absolute byte offset of the stored payload in its source
    size: int            # stored bytes (compressed size when compressed)
    raw_size: int = 0    # uncompressed bytes; 0 when stored raw (APR v2 convention)
    flags: int = 0       # per-tensor flags (APR v2: codec in bits 0-3)
    shard: int = 0       # which shard holds it, for sharded models

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        """Logical (uncompressed) bytes."""
        return self.dtype.nbytes(self.shape)


class RawTensor(NamedTuple):
    """A tensor's stored bytes (row-major, uncompressed, decrypted) with its type."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    data: bytes

    def load(self) -> bytes:
        return self.data


class LazyTensor(NamedTuple):
    """A tensor whose bytes are read only when a writer asks for them."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    loader: Callable[[], bytes]

    def load(self) -> bytes:
        return self.loader()


def check_shape(name: str, dtype: DType, shape: Any) -> Tuple[int, ...]:
    """Validate a tensor's shape for writing: 0..8 non-negative int dims, whole blocks."""
    if not isinstance(shape, (tuple, list)) or len(shape) > MAX_DIMS:
        raise AprError(ErrorCode.FORMAT, "tensor must have 0..8 dimensions", tensor=name,
                       shape=shape)
    dims = tuple(shape)
    for dim in dims:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise AprError(ErrorCode.FORMAT, "dimensions must be non-negative integers",
                           tensor=name, shape=dims)
    dtype.nbytes(dims)  # raises for partial blocks
    return dims


class ModelFile:
    """A parsed model file. Subclasses fill `format`, `metadata`, `tensors`, `_read_payload`."""

    format = "unknown"

    def __init__(self) -> None:
        self.metadata: Dict[str, Any] = {}
        self.tensors: Dict[str, TensorInfo] = {}
        # The byte source behind a single-file model; closed by `close()` only when owned
        # (opened by the library from a path), never when the caller handed it in.
        self.source: Optional[ByteSource] = None
        self.owns_source = False

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise AprError(ErrorCode.NOT_FOUND, "no such tensor", tensor=name,
                           available=len(self.tensors))

    def read_raw(self, name: str) -> RawTensor:
        """The tensor's bytes, verified (block framing, CRCs) and decompressed."""
        info = self.info(name)
        data = self._read_payload(info)
        if len(data) != info.nbytes:
            raise AprError(ErrorCode.CORRUPT, "tensor payload has the wrong size",
                           tensor=name, expected=info.nbytes, got=len(data))
        return RawTensor(info.name, info.dtype, info.shape, data)

    def lazy(self, name: str) -> LazyTensor:
        info = self.info(name)
        return LazyTensor(info.name, info.dtype, info.shape,
                          lambda: self.read_raw(name).data)

    def lazy_tensors(self) -> List[LazyTensor]:
        return [self.lazy(name) for name in self.tensors]

    def iter_raw(self) -> Iterator[RawTensor]:
        for name in self.tensors:
            yield self.read_raw(name)

    def _read_payload(self, info: TensorInfo) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        """Release the byte source if this model owns it (idempotent)."""
        if self.owns_source and self.source is not None:
            self.source.close()

    def __enter__(self) -> "ModelFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<{} {} tensors>".format(self.format, len(self.tensors))


def check_layout(tensors: List[TensorInfo], data_start: int, data_end: int,
                 source: str = "") -> None:
    """Every payload lies inside `[data_start, data_end)` and no two payloads overlap."""
    spans: List[Tuple[int, int, str]] = []
    for info in tensors:
        if info.offset < data_start or info.offset + info.size > data_end:
            raise AprError(ErrorCode.CORRUPT, "tensor data lies outside the data section",
                           tensor=info.name, offset=info.offset, size=info.size,
                           data_end=data_end, source=source)
        if info.size:
            spans.append((info.offset, info.offset + info.size, info.name))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise AprError(ErrorCode.CORRUPT, "tensor data regions overlap",
                           first=first, second=second, source=source)


__all__ = ["TensorInfo", "RawTensor", "LazyTensor", "ModelFile", "check_shape",
           "check_layout", "MAX_DIMS"]
