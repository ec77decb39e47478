"""whisper.cpp's model file: the legacy (pre-GGUF) ggml layout, written and read.

All integers little-endian int32 (the tensor payloads are the ggml types' bytes):

    u32 magic 0x67676d6c ("ggml")
    11 x i32 hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
                      n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
    i32 n_mel, i32 n_fft, then n_mel * n_fft float32 (the mel filter bank, row-major)
    i32 n_tokens, then per token: u32 length + its bytes (ids 0 .. n_tokens-1)
    tensors until the end of the file, each:
        i32 n_dims, i32 name length, i32 ggml type, n_dims x i32 dims innermost first
        (ggml's ne0 = the contiguous dimension), the name, the payload

`ftype` is a ggml file type (FTYPES), plus QNT_VERSION * 1000 when quantized (as
whisper.cpp's quantize tool writes it; the loader keeps `ftype % 1000`). There is no
alignment and no index: the loader reads tensor after tensor and looks each name up.
Shapes here are row-major (outermost first), as everywhere in apr; the file's dims are the
same list reversed, over the same bytes.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..atomic import atomic_output
from ..dtypes import DType, by_name, from_gguf_id
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source

MAGIC = 0x67676D6C
HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
           "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
# ggml_ftype: the file type -> the dtype of the big matrices (whisper.cpp's `wtype`).
FTYPES: Dict[str, int] = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8,
                          "Q5_1": 9, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13,
                          "Q6_K": 14}
QNT_VERSION = 2
QNT_FACTOR = 1000
MAX_DIMS = 4
_I32_MAX = (1 << 31) - 1
_MAX_NAME = 1 << 10
_MAX_TOKEN = 1 << 16


class GgmlTensor(NamedTuple):
    """One tensor record: row-major `shape`, `data` = the dtype's bytes for that shape."""

    name: str
    dtype: DType
    shape: Tuple[int, ...]
    data: Any


class WhisperGgml(NamedTuple):
    """A parsed file: hparams (ftype without the version), the version, filters, tokens
    and the tensors (name -> (dtype, row-major shape, payload offset))."""

    hparams: Dict[str, int]
    qnt_version: int
    mel_filters: Tuple[int, int, bytes]
    tokens: List[bytes]
    tensors: Dict[str, Tuple[DType, Tuple[int, ...], int]]


def file_type(dtype_name: str) -> int:
    """The stored `ftype` for matrices of `dtype_name` (versioned when quantized)."""
    if dtype_name not in FTYPES:
        raise AprError(ErrorCode.UNSUPPORTED, "whisper.cpp has no file type for this dtype",
                       dtype=dtype_name, supported=sorted(FTYPES))
    ftype = FTYPES[dtype_name]
    return ftype + QNT_VERSION * QNT_FACTOR if by_name(dtype_name).quantized else ftype


def _i32(value: int, what: str) -> bytes:
    if not isinstance(value, int) or not 0 <= value <= _I32_MAX:
        raise AprError(ErrorCode.ARGUMENT, "value does not fit the file's int32", field=what,
                       value=value)
    return struct.pack("<i", value)


def _tensor_header(tensor: GgmlTensor) -> bytes:
    name = tensor.name.encode("utf-8")
    if not 0 < len(name) <= _MAX_NAME or not 0 < len(tensor.shape) <= MAX_DIMS:
        raise AprError(ErrorCode.ARGUMENT, "tensor name or rank out of range", tensor=tensor.name,
                       dims=len(tensor.shape))
    if tensor.dtype.gguf_id is None:
        raise AprError(ErrorCode.UNSUPPORTED, "dtype has no ggml type id", tensor=tensor.name,
                       dtype=tensor.dtype.name)
    expected = tensor.dtype.nbytes(tensor.shape)
    if len(memoryview(tensor.data).cast("B")) != expected:
        raise AprError(ErrorCode.ARGUMENT, "tensor payload size does not match its shape",
                       tensor=tensor.name, size=len(memoryview(tensor.data).cast("B")),
                       expected=expected)
    head = [_i32(len(tensor.shape), "n_dims"), _i32(len(name), "name length"),
            _i32(tensor.dtype.gguf_id, "type")]
    head += [_i32(int(d), "dim") for d in reversed(tensor.shape)]
    return b"".join(head) + name


def write_whisper_ggml(path: Any, hparams: Dict[str, int], mel_filters: Tuple[int, int, bytes],
                       tokens: Sequence[bytes], tensors: Iterable[GgmlTensor],
                       overwrite: bool = True) -> int:
    """Write the file (temporary file, then renamed); returns the number of tensors.
    `hparams` holds HPARAMS (ftype as `file_type()` gives it); `mel_filters` is
    (n_mel, n_fft, float32 bytes); `tokens` are the vocabulary's byte strings."""
    missing = [k for k in HPARAMS if k not in hparams]
    if missing:
        raise AprError(ErrorCode.ARGUMENT, "whisper.cpp hyperparameters missing", missing=missing)
    n_mel, n_fft, filters = mel_filters
    if len(filters) != 4 * n_mel * n_fft:
        raise AprError(ErrorCode.ARGUMENT, "mel filter bytes do not match n_mel x n_fft",
                       n_mel=n_mel, n_fft=n_fft, size=len(filters))
    count = 0
    with atomic_output(path, overwrite=overwrite) as out:
        out.write(struct.pack("<I", MAGIC))
        out.write(b"".join(_i32(int(hparams[k]), k) for k in HPARAMS))
        out.write(_i32(n_mel, "n_mel") + _i32(n_fft, "n_fft") + bytes(filters))
        out.write(_i32(len(tokens), "n_tokens"))
        for token in tokens:
            if len(token) > _MAX_TOKEN:
                raise AprError(ErrorCode.ARGUMENT, "token longer than the reader accepts",
                               length=len(token))
            out.write(struct.pack("<I", len(token)) + bytes(token))
        for tensor in tensors:
            out.write(_tensor_header(tensor))
            out.write(memoryview(tensor.data).cast("B"))
            count += 1
    return count


class _Cursor:
    def __init__(self, source: ByteSource) -> None:
        self.source, self.pos, self.size = source, 0, source.size

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise AprError(ErrorCode.FORMAT, "whisper.cpp file truncated", reading=what,
                           offset=self.pos, needed=n, size=self.size)
        data = self.source.read(self.pos, n)
        self.pos += n
        return data

    def i32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]

    def count(self, what: str, cap: int) -> int:
        value = self.i32(what)
        if not 0 <= value <= cap:
            raise AprError(ErrorCode.FORMAT, "whisper.cpp file field out of range", field=what,
                           value=value, limit=cap)
        return value


def read_whisper_ggml(target: Any) -> WhisperGgml:
    """Parse a whisper.cpp model file (path, bytes or ByteSource): every count, dim and
    size is checked against the file before it is used; payloads are not read."""
    source = open_source(target)
    try:
        cur = _Cursor(source)
        if struct.unpack("<I", cur.take(4, "magic"))[0] != MAGIC:
            raise AprError(ErrorCode.FORMAT, "not a whisper.cpp (ggml) model file")
        hparams = {k: cur.count(k, _I32_MAX) for k in HPARAMS}
        version, hparams["ftype"] = divmod(hparams["ftype"], QNT_FACTOR)
        n_mel = cur.count("n_mel", 1 << 10)
        n_fft = cur.count("n_fft", 1 << 14)
        filters = cur.take(4 * n_mel * n_fft, "mel filters")
        n_tokens = cur.count("n_tokens", 1 << 20)
        tokens = [cur.take(cur.count("token length", _MAX_TOKEN), "token")
                  for _ in range(n_tokens)]
        tensors: Dict[str, Tuple[DType, Tuple[int, ...], int]] = {}
        while cur.pos < cur.size:
            n_dims = cur.count("n_dims", MAX_DIMS)
            name_len = cur.count("name length", _MAX_NAME)
            dtype = _dtype(cur.i32("type"))
            shape = tuple(reversed([cur.count("dim", _I32_MAX) for _ in range(n_dims)]))
            name = _name(cur.take(name_len, "name"))
            try:
                size = dtype.nbytes(shape)
            except AprError as exc:
                raise AprError(ErrorCode.FORMAT, "tensor shape is not whole blocks",
                               tensor=name, shape=list(shape), error=exc.message)
            tensors[name] = (dtype, shape, cur.pos)
            if cur.pos + size > cur.size:
                raise AprError(ErrorCode.FORMAT, "whisper.cpp file truncated", tensor=name,
                               offset=cur.pos, needed=size, size=cur.size)
            cur.pos += size
        return WhisperGgml(hparams, version, (n_mel, n_fft, filters), tokens, tensors)
    finally:
        if source is not target:
            source.close()


def _dtype(type_id: int) -> DType:
    try:
        return from_gguf_id(type_id)
    except AprError:
        raise AprError(ErrorCode.FORMAT, "unknown ggml tensor type", type=type_id)


def _name(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AprError(ErrorCode.FORMAT, "tensor name is not UTF-8", name=raw[:32].hex())


def read_tensor(target: Any, parsed: WhisperGgml, name: str) -> Optional[bytes]:
    """The payload bytes of tensor `name` (None when the file has no such tensor)."""
    if name not in parsed.tensors:
        return None
    dtype, shape, offset = parsed.tensors[name]
    source = open_source(target)
    try:
        return source.read(offset, dtype.nbytes(shape))
    finally:
        if source is not target:
            source.close()


__all__ = ["MAGIC", "HPARAMS", "FTYPES", "GgmlTensor", "WhisperGgml", "file_type",
           "write_whisper_ggml", "read_whisper_ggml", "read_tensor"]
