"""Zstandard codec with a size-capped decoder.

Back ends, first importable wins:

1. `compression.zstd` — the standard library from Python 3.14 (also inside Pyodide 314);
2. `backports.zstd` — the same API for older Pythons (PyPI `backports.zstd`);
3. `zstandard` — the long-standing PyPI binding.

Without any of them, compressing or decompressing raises `AprError(UNSUPPORTED)`; importing
this module never fails, so a reader of uncompressed or LZ4 files does not need zstd.

Decompression never trusts the frame: a declared content size must equal `raw_size`, output
is produced at most `raw_size` (+1 to detect overflow) bytes at a time, and truncated frames,
trailing bytes and size mismatches raise `AprError(CORRUPT)`.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Tuple, Union

from ..errors import AprError, ErrorCode
from . import checked_raw_size

BytesLike = Union[bytes, bytearray, memoryview]

DEFAULT_LEVEL = 3
# zstd's own level range (ZSTD_minCLevel() .. ZSTD_maxCLevel()); checked here so that every
# back end refuses the same levels instead of some clamping and others raising.
MIN_LEVEL = -(1 << 17)
MAX_LEVEL = 22
# Zstd's block size is at most 128 KiB and a block needs at least 4 input bytes, so one input
# byte can never yield more than this many output bytes. Feeding `zstandard` input in slices
# sized by it bounds how much one call can produce beyond what we still accept.
_MAX_RATIO = 32768
_FEED_SLACK = 1 << 22   # tolerated overshoot of one call (4 MiB) on frames of unknown size


def _load_stdlib_style() -> Any:
    """`compression.zstd` or its backport, which share one API; None when neither exists."""
    try:
        from compression import zstd as module  # type: ignore[import-not-found]  # novermin
        return module
    except ImportError:
        pass
    try:
        from backports import zstd as module  # type: ignore[import-not-found,no-redef]
        return module
    except ImportError:
        return None


def _load_zstandard() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found]
        return zstandard
    except ImportError:
        return None


def _corrupt(message: str, **context: object) -> AprError:
    return AprError(ErrorCode.CORRUPT, "zstd: " + message, **context)


def _check_raw_size(raw_size: int) -> int:
    return checked_raw_size(raw_size, "zstd")


class StdlibBackend:
    """Codec over `compression.zstd` (or `backports.zstd`, same API)."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.name = module.__name__

    def compress(self, data: BytesLike, level: int) -> bytes:
        return self.module.compress(data, level=level)

    def declared_size(self, data: BytesLike) -> Optional[int]:
        return self.module.get_frame_info(data).decompressed_size

    def decompress(self, data: BytesLike, raw_size: int) -> bytes:
        dctx = self.module.ZstdDecompressor()
        # max_length caps the output buffer; the decoder grows it as output appears rather
        # than allocating raw_size up front.
        out = dctx.decompress(data, max_length=raw_size)
        if not dctx.eof and not dctx.needs_input:
            # Stopped at the cap: the frame may still hold only its end marks (last block
            # header, checksum), or it may hold more output than allowed.
            if dctx.decompress(b"", max_length=1):
                raise _corrupt("frame decodes to more than the raw size", raw_size=raw_size)
        if not dctx.eof:
            raise _corrupt("truncated frame", decoded=len(out), raw_size=raw_size)
        if dctx.unused_data:
            raise _corrupt("trailing bytes after the frame", trailing=len(dctx.unused_data))
        return out


class ZstandardBackend:
    """Codec over the `zstandard` PyPI package."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.name = "zstandard"

    def compress(self, data: BytesLike, level: int) -> bytes:
        # A fresh compressor per call: zstandard's objects are not safe to share across
        # threads, and creating one is cheap next to compressing a 64 KiB block.
        return self.module.ZstdCompressor(level=level).compress(data)

    def declared_size(self, data: BytesLike) -> Optional[int]:
        size = self.module.frame_content_size(data)
        return None if size < 0 else size

    def decompress(self, data: BytesLike, raw_size: int) -> bytes:
        dobj = self.module.ZstdDecompressor().decompressobj()
        if self.module.frame_content_size(data) == raw_size:
            # A declared size is enforced by libzstd itself as blocks are decoded (it stops
            # with an error as soon as the output would pass it), so the frame can be fed
            # whole: the fast path for every frame apr writes.
            out = dobj.decompress(data)
            if not dobj.eof:
                raise _corrupt("truncated frame", decoded=len(out), raw_size=raw_size)
            if dobj.unused_data:
                raise _corrupt("trailing bytes after the frame", trailing=len(dobj.unused_data))
            return out
        view = memoryview(data)
        total = len(view)
        chunks = []  # type: List[bytes]
        produced = 0
        pos = 0
        # Unknown size: decompressobj has no output cap, so the input is fed in slices small
        # enough that one call cannot overshoot raw_size by more than _FEED_SLACK, even for
        # a zip bomb.
        while pos < total and not dobj.eof:
            step = max(64, (raw_size - produced + _FEED_SLACK) // _MAX_RATIO)
            chunk = dobj.decompress(view[pos:pos + step])
            pos += step
            produced += len(chunk)
            if produced > raw_size:
                raise _corrupt("frame decodes to more than the raw size", raw_size=raw_size)
            chunks.append(chunk)
        if not dobj.eof:
            raise _corrupt("truncated frame", decoded=produced, raw_size=raw_size)
        if dobj.unused_data or pos < total:
            raise _corrupt("trailing bytes after the frame",
                           trailing=len(dobj.unused_data) + max(0, total - pos))
        return b"".join(chunks)


def _select_backend() -> Any:
    module = _load_stdlib_style()
    if module is not None:
        return StdlibBackend(module)
    module = _load_zstandard()
    if module is not None:
        return ZstandardBackend(module)
    return None


_BACKEND = _select_backend()


def backend_name() -> Optional[str]:
    """Name of the zstd library in use, or None when none is importable."""
    return None if _BACKEND is None else _BACKEND.name


def _backend() -> Any:
    if _BACKEND is None:
        raise AprError(ErrorCode.UNSUPPORTED,
                       "zstd needs the standard library module compression.zstd (Python 3.14+)"
                       " or the 'zstandard' package (pip install zstandard); neither is"
                       " importable here")
    return _BACKEND


def _check_level(level: int) -> int:
    try:
        level = operator.index(level)
    except TypeError:
        raise AprError(ErrorCode.ARGUMENT, "zstd level must be an integer",
                       level=repr(level)) from None
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        raise AprError(ErrorCode.ARGUMENT, "zstd level out of range", level=level,
                       min=MIN_LEVEL, max=MAX_LEVEL)
    return level


def _errors(backend: Any) -> Tuple[type, ...]:
    """Exception types a back end raises for bad frames or bad parameters."""
    kinds = [ValueError, EOFError, OverflowError]  # type: List[type]
    error = getattr(backend.module, "ZstdError", None)
    if isinstance(error, type):
        kinds.append(error)
    return tuple(kinds)


def compress(data: BytesLike, level: Optional[int] = DEFAULT_LEVEL,
             backend: Any = None) -> bytes:
    """Compress `data` into one zstd frame (content size recorded in the header).

    `level` follows zstd (1..22, negative for faster modes); None means the default, 3.
    `backend` overrides the automatic choice (tests use it to exercise each library).
    """
    impl = backend or _backend()
    level = DEFAULT_LEVEL if level is None else _check_level(level)
    try:
        return impl.compress(data, level)
    except MemoryError:
        raise AprError(ErrorCode.MEMORY, "zstd compression ran out of memory",
                       size=len(data)) from None
    except _errors(impl) as exc:
        raise AprError(ErrorCode.ARGUMENT, "zstd compression failed: {}".format(exc),
                       level=level) from None


def decompress(data: BytesLike, raw_size: int, backend: Any = None) -> bytes:
    """Decompress one zstd frame that must expand to exactly `raw_size` bytes.

    Raises `AprError(CORRUPT)` for malformed frames, a declared content size other than
    `raw_size`, more or less output than `raw_size`, or bytes after the frame.
    """
    impl = backend or _backend()
    raw_size = _check_raw_size(raw_size)
    bad = _errors(impl)
    try:
        declared = impl.declared_size(data)
    except bad as exc:
        raise _corrupt("bad frame header: {}".format(exc), compressed_size=len(data)) from None
    if declared is not None and declared != raw_size:
        # Refused before decoding, so a frame claiming a huge size allocates nothing.
        raise _corrupt("frame content size differs from raw size", declared=declared,
                       raw_size=raw_size)
    try:
        out = impl.decompress(data, raw_size)
    except MemoryError:
        raise AprError(ErrorCode.MEMORY, "zstd decompression ran out of memory",
                       raw_size=raw_size) from None
    except bad as exc:
        raise _corrupt(str(exc), compressed_size=len(data), raw_size=raw_size) from None
    if len(out) != raw_size:
        raise _corrupt("decoded size differs from raw size", decoded=len(out), raw_size=raw_size)
    return out


def available() -> bool:
    """True when some zstd back end is importable."""
    return _BACKEND is not None


__all__ = ["compress", "decompress", "available", "backend_name", "DEFAULT_LEVEL",
           "MIN_LEVEL", "MAX_LEVEL", "StdlibBackend", "ZstandardBackend"]
