"""GGUF v2/v3 writer: key/value pairs, tensor infos, aligned tensor data.

The layout is the one `gguf.py` reads: header, KV pairs in the order given, tensor infos in
the order given (dims reversed back to GGUF's innermost-first order, offsets packed one
after another, each rounded up to the alignment), zero padding to the alignment, then each
tensor's bytes followed by zero padding to the alignment. That is the order and padding
llama.cpp and gguf-py use, so a file they wrote and we re-write from its parsed KV pairs and
tensors comes out byte-identical.

Only the header is built in memory; tensors are loaded and written one at a time, so
converting a model never holds more than one tensor payload.
"""
from __future__ import annotations

import io
import struct
from typing import IO, Any, Iterable, List, Mapping, Optional, Tuple

from ..atomic import atomic_output
from ..dtypes import DType, gguf_id_for_write
from ..errors import AprError, ErrorCode
from ..tensor import check_shape
from .gguf_values import (ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, SUPPORTED_VERSIONS,
                          Spec, encode_str, encode_value, infer_spec, normalize_spec,
                          spec_type_id)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ZEROS = bytes(4096)


def write_gguf(target: Any, tensors: Iterable[Any], kv: Mapping[str, Any],
               kv_types: Optional[Mapping[str, Any]] = None, alignment: Optional[int] = None,
               version: int = 3, overwrite: bool = True) -> int:
    """Write a GGUF file; returns the number of bytes written.

    `target` is a path (written atomically: temp file + rename) or a binary file object.
    `tensors` are objects with `name`, `dtype` (DType), row-major `shape` and `load()`
    returning the payload (RawTensor, LazyTensor). `kv` maps key -> value; `kv_types`
    gives the type spec of any key (see `gguf_values`), the others are inferred (bool ->
    bool, int -> i32/i64/u64 by range, float -> f32, str -> str, list -> array; an empty
    list needs a spec). `alignment` defaults to `kv["general.alignment"]` or 32; a
    non-default alignment missing from `kv` is appended to it as a u32.
    """
    header, plan, align = _prepare(list(tensors), kv, kv_types, alignment, version)
    if hasattr(target, "write"):
        return _emit(target, header, plan, align)
    with atomic_output(target, overwrite) as handle:
        return _emit(handle, header, plan, align)


def write_gguf_bytes(tensors: Iterable[Any], kv: Mapping[str, Any],
                     kv_types: Optional[Mapping[str, Any]] = None,
                     alignment: Optional[int] = None, version: int = 3) -> bytes:
    """`write_gguf` into memory (for tests and small files)."""
    buffer = io.BytesIO()
    write_gguf(buffer, tensors, kv, kv_types, alignment, version)
    return buffer.getvalue()


def _prepare(tensors: List[Any], kv: Mapping[str, Any], kv_types: Optional[Mapping[str, Any]],
             alignment: Optional[int], version: int) -> Tuple[bytes, List[Tuple[Any, int]], int]:
    """Validate everything and build the header bytes before the output is opened."""
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise AprError(ErrorCode.ARGUMENT, "GGUF version to write must be 2 or 3",
                       version=version)
    if not isinstance(kv, Mapping):
        raise AprError(ErrorCode.ARGUMENT, "kv must be a mapping of key -> value",
                       type=type(kv).__name__)
    types = dict(kv_types or {})
    for key in types:
        if key not in kv:
            raise AprError(ErrorCode.ARGUMENT, "kv_types names a key that kv lacks", key=key)
    align = _resolve_alignment(kv, types, alignment)
    pairs = list(kv.items())
    if ALIGNMENT_KEY not in kv and align != DEFAULT_ALIGNMENT:
        pairs.append((ALIGNMENT_KEY, align))
    if ALIGNMENT_KEY not in types:
        types[ALIGNMENT_KEY] = "u32"   # the only type llama.cpp and gguf-py accept for it

    parts = [GGUF_MAGIC, _U32.pack(version), _U64.pack(len(tensors)), _U64.pack(len(pairs))]
    for key, value in pairs:
        if not isinstance(key, str):
            raise AprError(ErrorCode.ARGUMENT, "GGUF metadata keys must be strings",
                           key=repr(key))
        spec: Spec = normalize_spec(types[key], key) if key in types else infer_spec(value, key)
        parts += [_string(key, key), _U32.pack(spec_type_id(spec)),
                  encode_value(value, spec, key)]

    plan: List[Tuple[Any, int]] = []
    names = set()
    offset = 0
    for tensor in tensors:
        name, type_id, shape, size = _tensor_entry(tensor)
        if name in names:
            raise AprError(ErrorCode.ARGUMENT, "duplicate tensor name", tensor=name)
        names.add(name)
        dims = tuple(reversed(shape))   # row-major -> GGUF's innermost-first order
        parts += [_string(name, name), _U32.pack(len(dims)),
                  struct.pack("<{}Q".format(len(dims)), *dims),
                  _U32.pack(type_id), _U64.pack(offset)]
        plan.append((tensor, size))
        offset = _align_up(offset + size, align)
    return b"".join(parts), plan, align


def _resolve_alignment(kv: Mapping[str, Any], types: Mapping[str, Any],
                       alignment: Optional[int]) -> int:
    stored = kv.get(ALIGNMENT_KEY)
    if ALIGNMENT_KEY in types and normalize_spec(types[ALIGNMENT_KEY], ALIGNMENT_KEY) != "u32":
        raise AprError(ErrorCode.ARGUMENT, "general.alignment must have type u32",
                       spec=repr(types[ALIGNMENT_KEY]))
    if alignment is None:
        alignment = DEFAULT_ALIGNMENT if stored is None else stored
    elif stored is not None and stored != alignment:
        raise AprError(ErrorCode.ARGUMENT, "alignment disagrees with kv general.alignment",
                       alignment=alignment, kv_alignment=stored)
    if (isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0
            or alignment & (alignment - 1) or alignment >= 1 << 32):
        raise AprError(ErrorCode.ARGUMENT, "alignment must be a power of two below 2**32",
                       alignment=repr(alignment))
    return alignment


def _tensor_entry(tensor: Any) -> Tuple[str, int, Tuple[int, ...], int]:
    """(name, ggml type id, row-major shape, payload bytes) of one tensor, validated."""
    name = getattr(tensor, "name", None)
    if not isinstance(name, str):
        raise AprError(ErrorCode.ARGUMENT, "tensor name must be a string", name=repr(name))
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise AprError(ErrorCode.ARGUMENT, "tensor name is not valid UTF-8", tensor=name)
    dtype = getattr(tensor, "dtype", None)
    if not isinstance(dtype, DType):
        raise AprError(ErrorCode.ARGUMENT, "tensor dtype must be an apr_core DType",
                       tensor=name, dtype=repr(dtype))
    type_id = gguf_id_for_write(dtype)
    shape = check_shape(name, dtype, getattr(tensor, "shape", None))
    return name, type_id, shape, dtype.nbytes(shape)


def _emit(handle: IO[bytes], header: bytes, plan: List[Tuple[Any, int]], align: int) -> int:
    handle.write(header)
    written = len(header) + _pad(handle, len(header), align)
    for tensor, size in plan:
        data = tensor.load()   # one payload in memory at a time
        got = memoryview(data).nbytes
        if got != size:
            raise AprError(ErrorCode.ARGUMENT, "tensor payload size does not match its "
                           "dtype and shape", tensor=tensor.name, expected=size, got=got)
        handle.write(data)
        del data
        written += size + _pad(handle, size, align)
    return written


def _pad(handle: IO[bytes], length: int, align: int) -> int:
    """Write zeros up to the next multiple of `align`; returns how many."""
    count = _align_up(length, align) - length
    left = count
    while left:
        step = min(left, len(_ZEROS))
        handle.write(_ZEROS[:step])
        left -= step
    return count


def _string(value: str, where: str) -> bytes:
    raw = encode_str(value, where)
    return _U64.pack(len(raw)) + raw


def _align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


__all__ = ["write_gguf", "write_gguf_bytes"]
