"""THE kernel registry: dtype name -> dequantize / quantize function (house rules 1 and 4).

Kernels are pure numpy functions over whole blocks:
  dequantize(blocks: np.ndarray[uint8, (n_blocks, type_size)]) -> np.ndarray[float32, (n_blocks, block_size)]
  quantize(values: np.ndarray[float32, (n_blocks, block_size)]) -> np.ndarray[uint8, (n_blocks, type_size)]
Accelerated backends (numba, CUDA, a browser WASM kernel) override entries through
`register(..., backend=...)` and `use_backend`; model code never branches on dtype or backend.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from ..errors import AprError, ErrorCode

Kernel = Callable[..., object]

# (kind, dtype name) -> {backend name: kernel}; kind is "dequantize" or "quantize".
_KERNELS: Dict[Tuple[str, str], Dict[str, Kernel]] = {}
_ACTIVE_BACKENDS = ["numpy"]


def register(kind: str, dtype_name: str, backend: str = "numpy") -> Callable[[Kernel], Kernel]:
    """Decorator: `@register("dequantize", "Q4_0")`."""
    def wrap(fn: Kernel) -> Kernel:
        _KERNELS.setdefault((kind, dtype_name), {})[backend] = fn
        return fn
    return wrap


def use_backend(name: str) -> None:
    """Prefer `name`'s kernels over numpy's where it has them."""
    if name not in _ACTIVE_BACKENDS:
        _ACTIVE_BACKENDS.insert(0, name)


def set_backend(name: str) -> None:
    """Prefer `name`'s kernels, numpy's where it has none (undoes earlier preferences)."""
    _ACTIVE_BACKENDS[:] = [name] if name == "numpy" else [name, "numpy"]


def active_backend() -> str:
    """The most preferred backend."""
    return _ACTIVE_BACKENDS[0]


def lookup(kind: str, dtype_name: str) -> Kernel:
    _load_kernels()
    table = _KERNELS.get((kind, dtype_name))
    if table:
        for backend in _ACTIVE_BACKENDS:
            if backend in table:
                return table[backend]
    raise AprError(ErrorCode.UNSUPPORTED, "unsupported quant type for {}".format(kind),
                   dtype=dtype_name)


def supported(kind: str) -> Tuple[str, ...]:
    _load_kernels()
    return tuple(sorted(name for (k, name) in _KERNELS if k == kind))


_loaded = False


def _load_kernels() -> None:
    """Import the kernel modules once (they register themselves); lazy to keep imports cheap."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import kernels  # noqa: F401  (registers every numpy kernel)
