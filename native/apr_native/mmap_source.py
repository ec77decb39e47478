"""Memory-mapped model loading: tensors become zero-copy numpy views of the file.

    model_file = open_mmap("model.gguf")      # reads the header and index only
    raw = model_file.read_raw(name)           # raw.data: a uint8 view, no bytes copied

`MmapSource` is a `ByteSource` whose `read` copies small ranges out as `bytes` (the format
parsers need real bytes), but returns a numpy `uint8` view of the mapping for the ranges
`open_mmap` marked as uncompressed tensor payloads (APR v2 raw tensors, every GGUF and
SafeTensors tensor). Loading a model is then O(header): pages are faulted in by the OS
when a kernel first touches them, shared with the page cache, and count once in RSS.

The mapping is private copy-on-write (`ACCESS_COPY`): the views are writable numpy arrays
(so numba compiles one kernel signature for mapped and in-memory weights alike), but a
write would only touch a private copy of that page, never the file.

`open_resident` (the engine's `EngineOptions(mmap=False)`, `apr bench --no-mmap`) reads the
file instead, into one anonymous buffer in 2 MiB huge pages (`ResidentSource`): its views are
writable like the mapping's, so numba runs the same compiled kernels. Why: one-token decode
streams every weight byte from DRAM, and where the file sits in the page cache in 4 KiB
pages (a file just written or downloaded: the write path caches it so; read cold, a 6.18
kernel's ext4 caches it in 2 MiB folios, mapped as fast as this) every 4 KiB page costs a
TLB miss and a page walk, where a 2 MiB page costs one for 512 of them. Qwen2 1.5B Q4_K_M, one AVX2 thread,
decode steps interleaved in one process (load 2.3-4.2): 117 -> 105 ms a token (min), 131
-> 117 (median); `bench/decode.py --no-mmap` (load 3.2-4.9) cpu-time 6.3-6.7 -> 7.5-7.6
tok/s, while llama.cpp's use_mmap=False changes nothing (5.9-6.4). The price: a private
copy of the file (not shared with the page cache or other processes) and a load that
reads every byte (1.1 GB: 2.1-3.6 s against 1.1-1.7 s mapped; faulting huge pages is the
slow part when the kernel must compact memory for them).

Whole-file checksums are skipped by default (`verify=False`), as llama.cpp does: verifying
an APR file's CRC reads every byte, which is the O(file) work mmap loading avoids; pass
`verify=True` (or run `apr validate`) to check them.
"""
from __future__ import annotations

import mmap
import os
from typing import Any, Iterable, Set, Tuple

import numpy as np

from apr_core.errors import AprError, ErrorCode
from apr_core.formats import flags as apr_flags
from apr_core.formats.open import open_model
from apr_core.io import ByteSource
from apr_core.tensor import ModelFile

CODEC_MASK = 0x0F


class MmapSource(ByteSource):
    """A file mapped read-only (copy-on-write) into memory."""

    VERB = "map"                    # what `_load` does, for the error message

    def __init__(self, path: Any) -> None:
        super().__init__()
        self.name = os.fspath(path)
        try:
            with open(self.name, "rb") as handle:
                self._size = os.fstat(handle.fileno()).st_size
                self._array = self._load(handle)                    # [size] uint8
        except FileNotFoundError:
            raise AprError(ErrorCode.IO, "file not found", path=self.name)
        except IsADirectoryError:
            raise AprError(ErrorCode.IO, "is a directory, not a file", path=self.name)
        except (OSError, ValueError) as exc:
            raise AprError(ErrorCode.IO, "cannot {} file: {}".format(self.VERB, exc),
                           path=self.name)
        self._zero_copy: Set[Tuple[int, int]] = set()

    def _load(self, handle: Any) -> np.ndarray:
        """The open file's `self._size` bytes as a `uint8` array (here: mapped)."""
        if not self._size:
            return np.zeros(0, np.uint8)
        return np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY), np.uint8)

    @property
    def size(self) -> int:
        return self._size

    def view(self, offset: int, length: int) -> np.ndarray:
        """`uint8 [length]` view of the mapping at `offset` (no copy)."""
        if offset < 0 or length < 0 or offset + length > self._size:
            raise AprError(ErrorCode.CORRUPT, "read beyond end of data (truncated file?)",
                           source=self.name, offset=offset, length=length, size=self._size)
        return self._array[offset:offset + length]

    def expose(self, spans: Iterable[Tuple[int, int]]) -> None:
        """Serve reads of exactly these `(offset, length)` ranges as zero-copy views."""
        self._zero_copy.update(spans)

    def _read(self, offset: int, length: int) -> Any:
        view = self._array[offset:offset + length]
        return view if (offset, length) in self._zero_copy else view.tobytes()

    def close(self) -> None:
        # The mapping itself lives as long as a view of it does (numpy holds a buffer
        # export, so mmap.close() would fail); dropping our references is enough.
        self._zero_copy.clear()


HUGE_PAGE = 2 << 20
READ_CHUNK = 64 << 20


class ResidentSource(MmapSource):
    """The whole file read into anonymous memory, 2 MiB aligned and advised into huge
    pages (MADV_HUGEPAGE, where the platform has it), served like `MmapSource`."""

    VERB = "read"

    def _load(self, handle: Any) -> np.ndarray:
        buffer = _huge_buffer(self._size)
        done = 0
        while done < self._size:
            got = handle.readinto(memoryview(buffer[done:done + READ_CHUNK]))
            if not got:
                raise AprError(ErrorCode.IO, "file shrank while being read",
                               path=self.name, size=self._size, read=done)
            done += got
        return buffer


def _huge_buffer(size: int) -> np.ndarray:
    """A writable `uint8 [size]` array starting on a 2 MiB boundary of an anonymous
    mapping advised into huge pages (numpy's allocation where there is no such mapping)."""
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if not size or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.empty(size, np.uint8)
    mapping = mmap.mmap(-1, size + HUGE_PAGE, flags=flags)
    whole = np.frombuffer(mapping, np.uint8)           # holds the mapping while it lives
    start = -whole.ctypes.data % HUGE_PAGE
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            mapping.madvise(advice)
        except OSError:             # huge pages off or unsupported: 4 KiB pages, still correct
            pass
    return whole[start:start + size]


def raw_spans(model: ModelFile) -> Iterable[Tuple[int, int]]:
    """`(offset, size)` of every tensor stored uncompressed and unencrypted."""
    if getattr(model, "payload_filter", None) is not None:
        return []
    if getattr(model, "flags", 0) & apr_flags.ENCRYPTED:
        return []
    return [(info.offset, info.size) for info in model.tensors.values()
            if info.size == info.nbytes and not info.flags & CODEC_MASK]


def open_mmap(path: Any, verify: bool = False) -> ModelFile:
    """Open a model file with its raw tensors as zero-copy views of a memory mapping.

    Directories and sharded manifests (several files) are opened the ordinary way.
    """
    return _open(MmapSource, path, verify)


def open_resident(path: Any, verify: bool = False) -> ModelFile:
    """`open_mmap` over the file read into huge-page memory (`ResidentSource`)."""
    return _open(ResidentSource, path, verify)


def _open(kind: Any, path: Any, verify: bool) -> ModelFile:
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith(".index.json"):
        return open_model(path, verify=verify)
    source = kind(path)
    try:
        model = open_model(source, verify=verify)
    except AprError as err:
        source.close()
        if err.code is not ErrorCode.ARGUMENT:
            raise
        return open_model(path, verify=verify)   # a sharded manifest: opened by path
    except BaseException:
        source.close()
        raise
    if model.source is source:
        model.owns_source = True
        source.expose(raw_spans(model))
    return model


__all__ = ["MmapSource", "ResidentSource", "open_mmap", "open_resident", "raw_spans"]
