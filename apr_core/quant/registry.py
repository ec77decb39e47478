"""THE kernel registry: (kind, dtype name) -> implementations, one per backend.

Kernels are pure numpy functions over whole blocks:
  dequantize(blocks: np.ndarray[uint8, (n_blocks, type_size)]) -> np.ndarray[float32, (n_blocks, block_size)]
  quantize(values: np.ndarray[float32, (n_blocks, block_size)]) -> np.ndarray[uint8, (n_blocks, type_size)]
Accelerated backends (numba, CUDA, a browser WASM kernel) add implementations with
`register(..., backend=...)`. A model runs through its own `Kernels` (one backend's choice
among them), so model code never branches on dtype or backend and nothing here is a
process-wide preference: two models in one process may run on different backends.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from ..errors import AprError, ErrorCode

Kernel = Callable[..., object]
REFERENCE = "numpy"

# (kind, dtype name) -> {backend name: kernel}; kinds: "dequantize", "quantize", "matmul",
# "matmul_group" and the fused kinds of apr_core.model.fused (dtype "*").
_KERNELS: Dict[Tuple[str, str], Dict[str, Kernel]] = {}


def register(kind: str, dtype_name: str, backend: str = REFERENCE
             ) -> Callable[[Kernel], Kernel]:
    """Decorator: `@register("dequantize", "Q4_0")`. Adds an implementation; which one a
    model runs is its `Kernels`' choice."""
    def wrap(fn: Kernel) -> Kernel:
        _KERNELS.setdefault((kind, dtype_name), {})[backend] = fn
        return fn
    return wrap


class Kernels:
    """One backend's view of the registry: its own kernels first, numpy's where it has none."""

    def __init__(self, backend: str = REFERENCE, uniform_rows: int = 1) -> None:
        self.backend = backend
        # Rows from which its matmul takes one path whatever the count (numba: integer
        # dots up to 16 rows, float products above): the batching scheduler prefills at
        # least this many rows so a cached prefix computes what a cold one does, and
        # verifies fewer drafted rows so each computes as a decode step does.
        self.uniform_rows = uniform_rows
        self._order = (backend,) if backend == REFERENCE else (backend, REFERENCE)

    def lookup(self, kind: str, dtype_name: str) -> Kernel:
        # looked up per call (two dict reads), so kernels registered later are seen
        return _pick(kind, dtype_name, self._order)

    def upgrade(self, prompt_tokens: Optional[int] = None) -> None:
        """Switch to the backend's fast kernels if it started on quick-to-load ones (the
        engine calls this before a prompt of `prompt_tokens`, and with None before the
        first decode step). Nothing to do here."""

    def become(self, other: "Kernels") -> None:
        """Run on `other`'s kernels from now on (every weight holding this object)."""
        self.backend, self.uniform_rows, self._order = (other.backend, other.uniform_rows,
                                                        other._order)

    def fused(self, kind: str) -> Kernel:
        """This backend's implementation of fused kind `kind` (apr_core.model.fused)."""
        return self.lookup(kind, "*")

    def __repr__(self) -> str:
        return "<Kernels {}>".format(self.backend)


NUMPY = Kernels(REFERENCE)     # the reference backend (immutable: shared by every model)


def _pick(kind: str, dtype_name: str, order: Tuple[str, ...]) -> Kernel:
    table = _KERNELS.get((kind, dtype_name))
    if table:
        for backend in order:
            if backend in table:
                return table[backend]
    raise AprError(ErrorCode.UNSUPPORTED, "unsupported quant type for {}".format(kind),
                   dtype=dtype_name)


def lookup(kind: str, dtype_name: str) -> Kernel:
    """The numpy reference implementation (the definition every backend is tested against)."""
    return _pick(kind, dtype_name, (REFERENCE,))


def supported(kind: str) -> Tuple[str, ...]:
    """Dtype names with a registered `kind` kernel (the numpy kernels register when
    `apr_core.quant.kernels` is imported; `apr_core.quant.supported_types` does that)."""
    return tuple(sorted(name for (k, name) in _KERNELS if k == kind))
