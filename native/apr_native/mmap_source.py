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

    def __init__(self, path: Any) -> None:
        super().__init__()
        self.name = os.fspath(path)
        try:
            with open(self.name, "rb") as handle:
                self._size = os.fstat(handle.fileno()).st_size
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) \
                    if self._size else None
        except FileNotFoundError:
            raise AprError(ErrorCode.IO, "file not found", path=self.name)
        except IsADirectoryError:
            raise AprError(ErrorCode.IO, "is a directory, not a file", path=self.name)
        except (OSError, ValueError) as exc:
            raise AprError(ErrorCode.IO, "cannot map file: {}".format(exc), path=self.name)
        self._array = np.frombuffer(self._map, np.uint8) if self._map is not None \
            else np.zeros(0, np.uint8)                              # [size] uint8
        self._zero_copy: Set[Tuple[int, int]] = set()

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
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith(".index.json"):
        return open_model(path, verify=verify)
    source = MmapSource(path)
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


__all__ = ["MmapSource", "open_mmap", "raw_spans"]
