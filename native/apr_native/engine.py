"""Loading THE engine natively: a model path or built-in name -> `apr_core.runtime.Engine`
with the backend chosen for it (`--backend`, else $APR_BACKEND, else the fastest
available) and the mmap opener.

    engine = load_engine("demo", EngineOptions(backend="numba"))

Every native entry point loads through here (`apr run`, `chat`, `serve`, `eval`,
`trace`, `bench`, `canary`, the benches, `examples/ray_serve.py`), so all of them run on
the same backend with the same mmap loading.
"""
from __future__ import annotations

import os
from typing import Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.engine import DEFAULT_KV_MEMORY, Engine, EngineOptions

from . import backends


def resolve_model(name: str) -> str:
    """A path on disk, a model reference (`hf://ORG/REPO[...]`, `https://...`: fetched into
    the cache and verified), a model named in apr.toml (at its apr.lock revision), or a
    built-in model name such as `demo` (located and verified)."""
    if os.path.exists(name):
        return name
    from . import project, references
    path = references.resolve(name) or project.resolve_name(name)
    if path is not None:
        return path
    from . import real_models
    if name in real_models.MODELS:
        return str(real_models.locate(name))
    raise AprError(ErrorCode.IO, "no such file or built-in model", path=name)


def load_engine(name: str, options: Optional[EngineOptions] = None,
         with_tokenizer: bool = True) -> Engine:
    """Resolve `name`, select the backend, open the file with mmap (unless
    `options.mmap` is off) and load the engine (`Engine.open`)."""
    options = options or EngineOptions()
    path = resolve_model(name)
    kernels = backends.select(options.backend)
    opener = None
    if options.mmap:
        from .mmap_source import open_mmap
        opener = open_mmap
    return Engine.open(path, options, kernels, opener, with_tokenizer)


__all__ = ["Engine", "EngineOptions", "load_engine", "resolve_model", "DEFAULT_KV_MEMORY"]
