"""Streaming access to APR v2 files (seed 000 §3.9 `StreamingLoader`).

Built for transports where every byte costs a request (browser `fetch` with Range
headers, IndexedDB): the header, metadata and index are read once, and each tensor is
read from exactly its own byte range. Over an asynchronous transport the loader runs
inside `apr_core.io.run_async`, which feeds it through a `SparseSource`::

    raw = await run_async(reader, lambda src: StreamingLoader(src).load_tensor("w"))

The loader never catches `NeedBytes`, and it keeps no half-built state when a read
raises, so `run_async` can simply re-run it after fetching the missing range.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from ..errors import AprError, ErrorCode
from ..io import open_source
from ..tensor import RawTensor, TensorInfo
from .apr2 import DEFAULT_MAX_METADATA, AprFile, read_apr2

DEFAULT_CACHE_BUDGET = 256 * 2 ** 20


class StreamingLoader:
    """Lazy, range-by-range reader of one APR v2 file.

    `prefetch(names)` reads stored payloads into a cache bounded by `cache_budget`
    bytes; `load_tensor` takes a tensor out of the cache (freeing its budget) or reads
    its range on demand, then decodes it.
    """

    def __init__(self, source: Any, cache_budget: int = DEFAULT_CACHE_BUDGET,
                 max_metadata: int = DEFAULT_MAX_METADATA) -> None:
        self.source = open_source(source)
        self.owns_source = self.source is not source
        self.cache_budget = cache_budget
        self.max_metadata = max_metadata
        self._file: Optional[AprFile] = None
        self._cache: Dict[str, bytes] = {}
        self._cached_bytes = 0

    def _model(self) -> AprFile:
        if self._file is None:
            # Assigned only once parsing succeeded: a NeedBytes mid-parse leaves no state.
            self._file = read_apr2(self.source, verify=False, max_metadata=self.max_metadata)
        return self._file

    def unlock(self, password: Optional[Any] = None, key: Optional[Any] = None) -> None:
        """Decrypt an ENCRYPTED file's tensors as they load: a password or the recipient's
        key pair (see `apr2_encrypt`); a wrong one raises AprError(DECRYPT) here, before
        any tensor is read."""
        from .apr2_encrypt import unlock
        unlock(self._model(), password, key)

    @property
    def warnings(self) -> List[str]:
        return self._model().warnings

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    def load_metadata(self) -> Dict[str, Any]:
        """The metadata JSON object (reads header, footer, metadata and index once)."""
        return self._model().metadata

    def load_index(self) -> List[TensorInfo]:
        """Every tensor's description, in index order; `offset` is absolute."""
        return list(self._model().tensors.values())

    def load_tensor(self, name: str) -> RawTensor:
        """One tensor's raw bytes, reading only its own range unless prefetched."""
        model = self._model()
        info = model.info(name)
        stored = self._cache.get(name)
        if stored is None:
            stored = self.source.read(info.offset, info.size)
        data = model.decode_stored(info, stored)
        if len(data) != info.nbytes:
            raise AprError(ErrorCode.CORRUPT, "tensor payload has the wrong size",
                           tensor=name, expected=info.nbytes, got=len(data))
        if name in self._cache:
            # Taken only after a successful decode, so a failed load can be retried.
            self._cached_bytes -= len(self._cache.pop(name))
        return RawTensor(info.name, info.dtype, info.shape, data)

    def prefetch(self, names: Iterable[str]) -> List[str]:
        """Read the stored ranges of `names` into the cache, in order, within the budget.

        Returns the names now cached; those that would overflow the budget are skipped
        (and will be read on demand by `load_tensor`).
        """
        model = self._model()
        cached = []
        for name in names:
            info = model.info(name)
            if name not in self._cache:
                if self._cached_bytes + info.size > self.cache_budget:
                    continue
                self._cache[name] = self.source.read(info.offset, info.size)
                self._cached_bytes += info.size
            cached.append(name)
        return cached

    def verify(self) -> None:
        """Check the whole file's CRC32 (E004 on mismatch); reads every byte once."""
        self._model().verify()

    def close(self) -> None:
        self._cache.clear()
        self._cached_bytes = 0
        if self.owns_source:
            self.source.close()

    def __enter__(self) -> "StreamingLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["StreamingLoader", "DEFAULT_CACHE_BUDGET"]
