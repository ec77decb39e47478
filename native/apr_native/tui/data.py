"""What the TUI reads from one model: its logical tensors (as `apr validate --stats` and
`apr diff` see them), their statistics and histograms, computed on demand and cached per
tensor, so a view pays only for the tensors it shows.

No Textual here: the views call these methods from worker threads. The file is read with
seek + read, so tensor bytes are loaded under a lock (one reader at a time); dequantizing
and summing run outside it.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from apr_core import stats as st
from apr_core.formats.open import open_model
from apr_core.tensor import LazyTensor

# Bins of the histogram view (`apr tensors --hist` defaults to the same kind of chart).
DEFAULT_BINS = 40


def matching(names: Any, query: str) -> List[str]:
    """The names containing `query` (any case), in their order: every view's search."""
    needle = query.lower()
    return [name for name in names if needle in name.lower()]


class Histogram(NamedTuple):
    """One tensor's distribution: its statistics and (counts [bins], edges [bins + 1])."""

    stats: st.TensorStats
    counts: List[int]
    edges: List[float]


class ModelData:
    """One opened model for the TUI (close it with `close()`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.model = open_model(path, verify=False)
        self._lock = threading.Lock()
        self.tensors: Dict[str, LazyTensor] = {
            t.name: LazyTensor(t.name, t.dtype, t.shape, self._locked(t.loader))
            for t in st.logical_tensors(self.model)}
        self._stats: Dict[str, st.TensorStats] = {}
        self._histograms: Dict[Tuple[str, int], Histogram] = {}
        self._summary: Optional[Dict[str, Any]] = None

    def _locked(self, loader: Callable[[], bytes]) -> Callable[[], bytes]:
        def load() -> bytes:
            with self._lock:
                return loader()
        return load

    @property
    def names(self) -> List[str]:
        """Tensor names in file order."""
        return list(self.tensors)

    @property
    def format(self) -> str:
        return self.model.format

    def elements(self, name: str) -> int:
        count = 1
        for dim in self.tensors[name].shape:
            count *= dim
        return count

    def nbytes(self, name: str) -> int:
        """Stored size of a tensor in bytes (its dtype's blocks)."""
        tensor = self.tensors[name]
        return tensor.dtype.nbytes(tuple(tensor.shape))

    def summary(self) -> Dict[str, Any]:
        """Family, architecture and hyperparameters, as `apr explain MODEL` reports them."""
        if self._summary is None:
            from ..cli.explain_cmd import explain_model
            self._summary = explain_model(self.model, self.path)
        return self._summary

    def cached_stats(self, name: str) -> Optional[st.TensorStats]:
        """The statistics of `name` if they were computed already, else None (no work)."""
        return self._stats.get(name)

    def stats(self, name: str) -> st.TensorStats:
        """min/max/mean/std/zeros/NaN of one tensor's dequantized values (cached)."""
        found = self._stats.get(name)
        if found is None:
            tensor = self.tensors[name]
            found = st.tensor_stats(name, st.tensor_values(tensor), tensor.dtype.name)
            self._stats[name] = found
        return found

    def histogram(self, name: str, bins: int = DEFAULT_BINS) -> Histogram:
        """The value distribution of one tensor (finite values; cached per bin count)."""
        key = (name, bins)
        found = self._histograms.get(key)
        if found is None:
            tensor = self.tensors[name]
            values = st.tensor_values(tensor)                      # [*shape] f32
            stats = self._stats.get(name) or st.tensor_stats(name, values, tensor.dtype.name)
            self._stats[name] = stats
            counts, edges = st.histogram(values, bins)
            found = Histogram(stats, [int(c) for c in counts], [float(e) for e in edges])
            self._histograms[key] = found
        return found

    def close(self) -> None:
        self.model.close()
