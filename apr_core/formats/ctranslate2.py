"""CTranslate2 `model.bin` reader (bounded, lazy), as written by CTranslate2's converters.

Layout (all little-endian), per CTranslate2's `Model::load` (src/models/model.cc):

    u32 binary_version                    1..6 are known
    if version >= 2: string spec_name, u32 spec_revision
    u32 variable_count
    per variable: string name, u8 rank, u32 dims[rank],
                  version >= 4: u8 dtype id, u32 payload bytes
                  version <  4: u8 item size, u32 element count   (item size -> dtype)
                  then the payload (row-major)
    if version >= 3: u32 alias_count, per alias: string alias, string target

A string is `u16 length` (counting a trailing NUL) then the bytes, NUL included.
Variables and their payloads interleave, so parsing walks the file once reading only the
small descriptors; payload bytes are read by `read_raw`. Everything is checked before it
is trusted: counts against the bytes left, ranks, dims, payload sizes against the shape,
names (non-empty, unique, UTF-8), alias targets. Rank-0 variables are the spec's scalars
(head counts, flags); `scalars()` decodes them.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from .. import dtypes
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..tensor import MAX_DIMS, ModelFile, TensorInfo

KNOWN_VERSIONS = (1, 2, 3, 4, 5, 6)
# CTranslate2's DataType enum order (include/ctranslate2/types.h).
DTYPE_IDS = {0: "F32", 1: "I8", 2: "I16", 3: "I32", 4: "F16", 5: "BF16"}
# Before binary version 4 only the item size was stored (CTranslate2's own legacy rule).
ITEM_SIZE_DTYPES = {4: "F32", 2: "I16", 1: "I8"}
_SCALAR_CODES = {"F32": "f", "F16": "e", "I8": "b", "I16": "h", "I32": "i"}
_MIN_VARIABLE_BYTES = 2 + 1 + 1 + 1 + 4      # 1-char name + NUL, rank 0, dtype, size
_MIN_ALIAS_BYTES = 2 * (2 + 2)               # two 1-char strings


class CT2File(ModelFile):
    """A parsed CTranslate2 model.bin: `tensors` (absolute offsets), `metadata` with
    `binary_version`, `spec`, `spec_revision` and `aliases` (alias -> variable name)."""

    format = "ctranslate2"

    def __init__(self, source: ByteSource, owns_source: bool) -> None:
        super().__init__()
        self.source = source
        self.owns_source = owns_source

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self.source.read(info.offset, info.size)

    def resolve(self, name: str) -> TensorInfo:
        """A variable by name or by alias (E010 when neither)."""
        target = self.metadata.get("aliases", {}).get(name, name)
        return self.info(target)

    def scalars(self) -> Dict[str, Any]:
        """Rank-0 variables decoded to Python numbers (name -> int or float)."""
        out: Dict[str, Any] = {}
        for name, info in self.tensors.items():
            code = _SCALAR_CODES.get(info.dtype.name)
            if info.shape == () and code is not None:
                out[name] = struct.unpack("<" + code, self._read_payload(info))[0]
        return out


class _Reader:
    """Sequential bounded reads over a source, with the position in every error."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.pos = 0

    def left(self) -> int:
        return self.source.size - self.pos

    def need(self, nbytes: int, what: str) -> None:
        if nbytes > self.left():
            raise AprError(ErrorCode.CORRUPT, "CTranslate2 model ends early (truncated or "
                           "corrupt)", needed=what, offset=self.pos, wanted=nbytes,
                           left=self.left(), source=self.source.name)

    def take(self, nbytes: int, what: str) -> bytes:
        self.need(nbytes, what)
        data = self.source.read(self.pos, nbytes)
        self.pos += nbytes
        return data

    def unpack(self, fmt: str, what: str) -> Tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def u8(self, what: str) -> int:
        return self.unpack("B", what)[0]

    def u32(self, what: str) -> int:
        return self.unpack("I", what)[0]

    def string(self, what: str) -> str:
        (length,) = self.unpack("H", what)
        if length < 2:
            raise AprError(ErrorCode.FORMAT, "empty or zero-length string in CTranslate2 "
                           "model", field=what, offset=self.pos - 2, source=self.source.name)
        raw = self.take(length, what)
        if raw[-1:] != b"\0":
            raise AprError(ErrorCode.FORMAT, "CTranslate2 string is not NUL-terminated",
                           field=what, offset=self.pos - length, source=self.source.name)
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise AprError(ErrorCode.FORMAT, "CTranslate2 string is not valid UTF-8",
                           field=what, offset=self.pos - length, source=self.source.name)


def read_ctranslate2(source: Any) -> CT2File:
    """Parse a CTranslate2 `model.bin` from a ByteSource, bytes or path (payloads lazy)."""
    src = open_source(source)
    result = CT2File(src, owns_source=src is not source)
    try:
        _parse(result, _Reader(src))
    except BaseException:
        result.close()
        raise
    return result


def _parse(out: CT2File, cur: _Reader) -> None:
    name = cur.source.name
    version = cur.u32("binary_version")
    if version not in KNOWN_VERSIONS:
        raise AprError(ErrorCode.VERSION, "unsupported CTranslate2 binary version",
                       version=version, known=list(KNOWN_VERSIONS), source=name)
    spec, revision = None, 1
    if version >= 2:
        spec = cur.string("spec name")
        revision = cur.u32("spec revision")
    count = cur.u32("variable_count")
    cur.need(count * _MIN_VARIABLE_BYTES, "{} variables".format(count))
    for index in range(count):
        info = _read_variable(cur, version, index)
        if info.name in out.tensors:
            raise AprError(ErrorCode.FORMAT, "duplicate variable name", tensor=info.name,
                           source=name)
        out.tensors[info.name] = info
    aliases: Dict[str, str] = {}
    if version >= 3:
        alias_count = cur.u32("alias_count")
        cur.need(alias_count * _MIN_ALIAS_BYTES, "{} aliases".format(alias_count))
        for _ in range(alias_count):
            alias, target = cur.string("alias"), cur.string("alias target")
            if target not in out.tensors:
                raise AprError(ErrorCode.FORMAT, "alias names a missing variable",
                               alias=alias, target=target, source=name)
            aliases[alias] = target
    out.metadata = {"binary_version": version, "spec": spec, "spec_revision": revision,
                    "aliases": aliases, "trailing_bytes": cur.left()}


def _read_variable(cur: _Reader, version: int, index: int) -> TensorInfo:
    where = "variable {}".format(index)
    name = cur.string(where + " name")
    rank = cur.u8(name + " rank")
    if rank > MAX_DIMS:
        raise AprError(ErrorCode.FORMAT, "variable has too many dimensions", tensor=name,
                       rank=rank, max=MAX_DIMS, source=cur.source.name)
    shape = cur.unpack("{}I".format(rank), name + " dims") if rank else ()
    dtype, nbytes = _dtype_and_size(cur, version, name)
    expected = dtype.nbytes(shape)
    if nbytes != expected:
        raise AprError(ErrorCode.FORMAT, "variable payload size does not match its shape",
                       tensor=name, shape=list(shape), dtype=dtype.name, size=nbytes,
                       expected=expected, source=cur.source.name)
    cur.need(nbytes, name + " payload")
    info = TensorInfo(name, dtype, tuple(shape), cur.pos, nbytes)
    cur.pos += nbytes
    return info


def _dtype_and_size(cur: _Reader, version: int, name: str) -> Tuple[dtypes.DType, int]:
    if version >= 4:
        type_id = cur.u8(name + " dtype")
        nbytes = cur.u32(name + " size")
        dtype_name: Optional[str] = DTYPE_IDS.get(type_id)
        if dtype_name is None:
            raise AprError(ErrorCode.UNSUPPORTED, "unknown CTranslate2 dtype id",
                           tensor=name, dtype_id=type_id, source=cur.source.name)
        return dtypes.by_name(dtype_name), nbytes
    item_size = cur.u8(name + " item size")
    count = cur.u32(name + " element count")
    dtype_name = ITEM_SIZE_DTYPES.get(item_size)
    if dtype_name is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown CTranslate2 item size", tensor=name,
                       item_size=item_size, source=cur.source.name)
    return dtypes.by_name(dtype_name), count * item_size


def write_ctranslate2_bytes(spec: str, revision: int,
                            variables: List[Tuple[str, str, Tuple[int, ...], bytes]],
                            aliases: Optional[Dict[str, str]] = None) -> bytes:
    """A version-6 model.bin from (name, dtype name, shape, payload) tuples: for tests and
    fixtures (apr never converts *to* CTranslate2)."""
    ids = {v: k for k, v in DTYPE_IDS.items()}

    def string(text: str) -> bytes:
        raw = text.encode("utf-8") + b"\0"
        return struct.pack("<H", len(raw)) + raw

    parts = [struct.pack("<I", 6), string(spec), struct.pack("<II", revision, len(variables))]
    for name, dtype_name, shape, payload in variables:
        parts += [string(name), struct.pack("<B", len(shape)),
                  struct.pack("<{}I".format(len(shape)), *shape),
                  struct.pack("<BI", ids[dtype_name], len(payload)), payload]
    parts.append(struct.pack("<I", len(aliases or {})))
    for alias, target in (aliases or {}).items():
        parts += [string(alias), string(target)]
    return b"".join(parts)


__all__ = ["CT2File", "read_ctranslate2", "write_ctranslate2_bytes", "DTYPE_IDS"]
