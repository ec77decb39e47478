"""PyTorch checkpoints (`.pt`, `.pth`, `.bin`) read without ever running their pickle code.

    open_torch(path) -> TorchFile (a ModelFile: tensors read lazily, row-major)

A PyTorch file is a pickle that rebuilds tensors by calling functions it names. Loading
one with `pickle` (or `torch.load(weights_only=False)`) runs whatever it names:
`os.system`, `builtins.eval`, anything. Here the unpickler resolves only the handful of
globals a state_dict needs (`ALLOWED`) and maps each to an inert local stand-in: a tensor
becomes a `TorchTensor` record (storage key, dtype, offset, shape, strides), never a call
into torch. Any other global -- however it is reached (GLOBAL, STACK_GLOBAL, INST, OBJ,
the copyreg extension registry) -- stops the load with AprError(VALIDATION) before
anything is called, because every one of those opcodes goes through `find_class`.

Both container formats torch writes are read: the zip archive (`<root>/data.pkl` plus one
`<root>/data/<key>` member per storage) and the legacy stream (magic, protocol and
sys-info pickles, the main pickle, the storage key list, then each storage as a u64
element count and its bytes). Shapes, strides and offsets are checked against the
storage sizes before any array is built.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.tensor import ModelFile, TensorInfo

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
MAX_PICKLE_BYTES = 1 << 30       # data.pkl of a real 70B checkpoint is ~1 MiB

# torch storage class -> (APR dtype name, element size, numpy dtype to read with).
# Doubles become F32 (APR has no F64); bools are stored as U8.
STORAGES = {
    "FloatStorage": ("F32", 4, "<f4"), "HalfStorage": ("F16", 2, "<f2"),
    "BFloat16Storage": ("BF16", 2, "<u2"), "DoubleStorage": ("F32", 8, "<f8"),
    "LongStorage": ("I64", 8, "<i8"), "IntStorage": ("I32", 4, "<i4"),
    "ShortStorage": ("I16", 2, "<i2"), "CharStorage": ("I8", 1, "i1"),
    "ByteStorage": ("U8", 1, "u1"), "BoolStorage": ("U8", 1, "u1"),
}


@dataclass(frozen=True)
class StorageType:
    """Stand-in for `torch.FloatStorage` & co.: only its name is kept."""

    name: str


@dataclass(frozen=True)
class Storage:
    """A persistent-id reference to one storage: key, element type, element count."""

    key: str
    kind: StorageType
    numel: int


class TorchTensor:
    """What `_rebuild_tensor_v2` would have built, as a plain record."""

    __slots__ = ("storage", "offset", "shape", "stride")

    def __init__(self, storage: Storage, offset: int, shape: Tuple[int, ...],
                 stride: Tuple[int, ...]) -> None:
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def __setstate__(self, state: Any) -> None:
        # BUILD on a tensor could rewrite its fields after the bounds check: refuse.
        raise _forbidden("BUILD on a tensor")


def _forbidden(what: str) -> AprError:
    return AprError(ErrorCode.VALIDATION, "refused unsafe pickle: it references {} (only "
                    "tensor rebuilding is allowed; nothing was executed)".format(what))


def _ints(value: Any, what: str) -> Tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > 8 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise AprError(ErrorCode.CORRUPT, "tensor {} is not a tuple of 0..8 non-negative "
                       "ints".format(what), value=repr(value)[:80])
    return tuple(value)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> TorchTensor:
    """`torch._utils._rebuild_tensor[_v2]`: checks every index stays inside the storage."""
    if not isinstance(storage, Storage) or not isinstance(offset, int) or offset < 0:
        raise AprError(ErrorCode.CORRUPT, "tensor rebuild arguments are malformed")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise AprError(ErrorCode.CORRUPT, "tensor size and stride differ in length",
                       shape=shape, stride=strides)
    last = offset + sum((d - 1) * s for d, s in zip(shape, strides)) if all(shape) else offset
    count = 1
    for dim in shape:
        count *= dim
    if count and last >= storage.numel:
        raise AprError(ErrorCode.CORRUPT, "tensor reaches past the end of its storage",
                       shape=shape, stride=strides, offset=offset, storage_numel=storage.numel)
    if count > storage.numel:
        # Only a broadcast view (stride 0) has more elements than its storage; refusing it
        # keeps a 16-byte storage from expanding into terabytes at read time.
        raise AprError(ErrorCode.UNSUPPORTED, "broadcast tensor views are not supported",
                       shape=shape, stride=strides, storage_numel=storage.numel)
    return TorchTensor(storage, offset, shape, strides)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    """`torch._utils._rebuild_parameter[_with_state]`: a Parameter is its tensor."""
    if not isinstance(data, TorchTensor):
        raise AprError(ErrorCode.CORRUPT, "parameter does not wrap a tensor")
    return data


def _ordered_dict(*args: Any) -> "collections.OrderedDict[Any, Any]":
    # Called only with no arguments or a list of pairs: plain data, no callables.
    return collections.OrderedDict(*args)


# (module, name) -> the stand-in `find_class` returns. THE allow-list.
ALLOWED: Dict[Tuple[str, str], Any] = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
}
ALLOWED.update({("torch", name): StorageType(name) for name in STORAGES})


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only `ALLOWED` globals and torch storage references."""

    def __init__(self, handle: Any, storages: Dict[str, Storage]) -> None:
        super().__init__(handle)
        self.storages = storages

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise _forbidden("the global {}.{}".format(module, name)) from None

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"
                and isinstance(pid[1], StorageType) and isinstance(pid[4], int)
                and pid[4] >= 0):
            raise _forbidden("a persistent id other than a torch storage")
        key = str(pid[2])
        known = self.storages.get(key)
        if known is not None and (known.kind != pid[1] or known.numel != pid[4]):
            raise AprError(ErrorCode.CORRUPT, "one storage key is declared twice differently",
                           key=key)
        self.storages[key] = Storage(key, pid[1], pid[4])
        return self.storages[key]


def safe_loads(data: bytes, storages: Optional[Dict[str, Storage]] = None) -> Any:
    """Unpickle `data` with the allow-list (also the entry point for plain pickles)."""
    try:
        return SafeUnpickler(io.BytesIO(data), {} if storages is None else storages).load()
    except AprError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, struct.error, UnicodeDecodeError, RecursionError,
            OverflowError, MemoryError) as exc:
        raise AprError(ErrorCode.CORRUPT, "malformed pickle: {}".format(
            str(exc)[:120] or type(exc).__name__))


def flatten(obj: Any, prefix: str = "") -> Dict[str, TorchTensor]:
    """name -> tensor for every tensor in nested dicts (names joined with ".")."""
    out: Dict[str, TorchTensor] = {}
    if isinstance(obj, TorchTensor):
        out[prefix.rstrip(".")] = obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            out.update(flatten(value, "{}{}.".format(prefix, key)))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            out.update(flatten(value, "{}{}.".format(prefix, index)))
    return out


def state_dict(obj: Any) -> Dict[str, TorchTensor]:
    """The tensors of a state_dict, or of a checkpoint wrapping one (`{"state_dict": ...,
    "epoch": 3}`): a top-level wrapper that holds every tensor is descended into."""
    while isinstance(obj, dict):
        holders = [v for v in obj.values() if flatten(v)]
        if len(holders) == 1 and isinstance(holders[0], dict) and \
                not any(isinstance(v, TorchTensor) for v in obj.values()):
            obj = holders[0]
            continue
        break
    return flatten(obj)


class TorchFile(ModelFile):
    """A PyTorch checkpoint as a ModelFile; `read_raw` gathers a tensor from its storage."""

    format = "pytorch"

    def __init__(self, tensors: Dict[str, TorchTensor], read_storage: Callable[[Storage], bytes],
                 close: Callable[[], None]) -> None:
        super().__init__()
        self._torch = tensors
        self._read_storage = read_storage
        self._close = close
        self.metadata = {"source_format": "pytorch"}
        for name, tensor in sorted(tensors.items()):
            dtype = dtypes.by_name(STORAGES[tensor.storage.kind.name][0])
            self.tensors[name] = TensorInfo(name, dtype, tensor.shape, 0,
                                            dtype.nbytes(tensor.shape))

    def _read_payload(self, info: TensorInfo) -> bytes:
        tensor = self._torch[info.name]
        _, elsize, np_dtype = STORAGES[tensor.storage.kind.name]
        raw = self._read_storage(tensor.storage)
        flat = np.frombuffer(raw, dtype=np_dtype)                      # [numel]
        itemsize = flat.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[tensor.offset:], shape=tensor.shape,
            strides=tuple(s * itemsize for s in tensor.stride), writeable=False)
        values = np.ascontiguousarray(view)                            # [*shape] row-major
        if np_dtype == "<f8":
            values = values.astype("<f4")
        return values.tobytes()

    def close(self) -> None:
        self._close()


def _storage_bytes(storage: Storage) -> int:
    return storage.numel * STORAGES[storage.kind.name][1]


def _open_zip(path: str) -> TorchFile:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise AprError(ErrorCode.FORMAT, "not a readable PyTorch zip archive: {}".format(exc),
                       path=path)
    try:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise AprError(ErrorCode.FORMAT, "PyTorch archive must hold exactly one data.pkl",
                           path=path, found=len(pickles))
        root = pickles[0][:-len("data.pkl")]
        order = root + "byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise AprError(ErrorCode.UNSUPPORTED, "big-endian PyTorch files are not supported")
        info = archive.getinfo(pickles[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise AprError(ErrorCode.MEMORY, "data.pkl is implausibly large",
                           size=info.file_size)
        storages: Dict[str, Storage] = {}
        tensors = state_dict(safe_loads(archive.read(pickles[0]), storages))
    except BaseException:
        archive.close()
        raise

    def read(storage: Storage) -> bytes:
        member = "{}data/{}".format(root, storage.key)
        try:
            entry = archive.getinfo(member)
        except KeyError:
            raise AprError(ErrorCode.CORRUPT, "storage missing from archive", member=member)
        if entry.file_size != _storage_bytes(storage):
            raise AprError(ErrorCode.CORRUPT, "storage size does not match its declaration",
                           member=member, expected=_storage_bytes(storage), got=entry.file_size)
        try:
            return archive.read(member)
        except (zipfile.BadZipFile, OSError) as exc:
            raise AprError(ErrorCode.CORRUPT, "cannot read storage: {}".format(exc),
                           member=member)

    return TorchFile(tensors, read, archive.close)


def _open_legacy(path: str) -> TorchFile:
    with open(path, "rb") as handle:
        data = handle.read()
    stream = io.BytesIO(data)

    def next_pickle(storages: Optional[Dict[str, Storage]] = None) -> Any:
        start = stream.tell()
        unpickler = SafeUnpickler(stream, {} if storages is None else storages)
        try:
            return unpickler.load()
        except AprError:
            raise
        except Exception as exc:
            raise AprError(ErrorCode.CORRUPT, "malformed legacy PyTorch pickle: {}".format(
                str(exc)[:120] or type(exc).__name__), offset=start)

    if next_pickle() != LEGACY_MAGIC:
        raise AprError(ErrorCode.FORMAT, "not a PyTorch file (bad legacy magic)", path=path)
    next_pickle()   # protocol version
    sys_info = next_pickle()
    if isinstance(sys_info, dict) and sys_info.get("little_endian") is False:
        raise AprError(ErrorCode.UNSUPPORTED, "big-endian PyTorch files are not supported")
    storages: Dict[str, Storage] = {}
    tensors = state_dict(next_pickle(storages))
    keys = next_pickle()
    if not isinstance(keys, list):
        raise AprError(ErrorCode.CORRUPT, "legacy storage key list is malformed")
    spans: Dict[str, Tuple[int, int]] = {}
    pos = stream.tell()
    for key in keys:
        storage = storages.get(str(key))
        if storage is None or pos + 8 > len(data):
            raise AprError(ErrorCode.CORRUPT, "legacy storage list does not match the pickle",
                           key=str(key))
        (numel,) = struct.unpack_from("<q", data, pos)
        size = _storage_bytes(storage)
        if numel != storage.numel or pos + 8 + size > len(data):
            raise AprError(ErrorCode.CORRUPT, "legacy storage is truncated or mis-sized",
                           key=str(key), declared=storage.numel, found=numel)
        spans[storage.key] = (pos + 8, size)
        pos += 8 + size

    def read(storage: Storage) -> bytes:
        if storage.key not in spans:
            raise AprError(ErrorCode.CORRUPT, "tensor refers to a storage with no data",
                           key=storage.key)
        start, size = spans[storage.key]
        return data[start:start + size]

    return TorchFile(tensors, read, lambda: None)


def is_torch_file(path: str) -> bool:
    """Not one of the formats `open_model` reads (APR, GGUF, SafeTensors): so a zip
    archive or a pickle stream, which `open_torch` reads without running it."""
    from apr_core.errors import AprError as _Error
    from apr_core.formats.detect import detect_bytes
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
        detect_bytes(head, os.path.getsize(path))
    except (OSError, _Error):
        return True
    return False


def open_torch(path: str) -> TorchFile:
    """Open a PyTorch checkpoint (zip or legacy) safely; see the module docstring."""
    if not os.path.isfile(path):
        raise AprError(ErrorCode.IO, "no such file", path=path)
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head == b"PK\x03\x04":
        return _open_zip(path)
    # Anything else is read as a legacy pickle stream: the allow-list decides, so even a
    # protocol-0 pickle is refused for what it references, not for its first byte.
    return _open_legacy(path)


__all__ = ["open_torch", "is_torch_file", "safe_loads", "TorchFile", "ALLOWED",
           "SafeUnpickler"]
