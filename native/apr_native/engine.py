"""Loading THE engine natively: a model path or built-in name -> `apr_core.runtime.Engine`
with the backend chosen for it (`--backend`, else $APR_BACKEND, else the fastest
available) and the mmap opener.

    engine = load_engine("demo", EngineOptions(backend="numba"))

Every native entry point loads through here (`apr run`, `chat`, `serve`, `eval`,
`trace`, `bench`, `canary`, the benches, `examples/ray_serve.py`), so all of them run on
the same backend with the same mmap loading.
"""
from __future__ import annotations

from typing import Callable, Optional

from apr_core.quant.registry import Kernels
from apr_core.runtime.engine import DEFAULT_KV_MEMORY, Engine, EngineOptions

from . import backends
from .model_names import resolve_model


def load_engine(name: str, options: Optional[EngineOptions] = None,
         with_tokenizer: bool = True,
         wrap_kernels: Optional[Callable[[Kernels], Kernels]] = None,
         quick_start: bool = False) -> Engine:
    """Resolve `name`, select the backend, open the file with mmap (unless
    `options.mmap` is off) and load the engine (`Engine.open`). `wrap_kernels(kernels)`
    gives the kernels the model runs on instead of the selected ones (`apr profile`'s
    timing view of them); `quick_start`: see `backends.select`. Without `options.mmap`
    the file is read into huge-page memory (`mmap_source.open_resident`)."""
    options = options or EngineOptions()
    path = resolve_model(name)
    kernels = backends.select(options.backend, quick_start, options.threads)
    if wrap_kernels is not None:
        kernels = wrap_kernels(kernels)
    from .mmap_source import open_mmap, open_resident
    opener = open_mmap if options.mmap else open_resident    # no mmap: huge-page memory
    engine = Engine.open(path, options, kernels, opener, with_tokenizer)
    if quick_start and options.backend is None:
        from .simd.quick_start import settle     # numba's now, or compiling in the background
        settle(kernels, path, engine.transformer)
    return engine


__all__ = ["Engine", "EngineOptions", "load_engine", "resolve_model", "DEFAULT_KV_MEMORY"]
