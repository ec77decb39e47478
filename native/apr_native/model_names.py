"""Model names -> a file on disk, without loading anything: paths, references
(`hf://...`, URLs), names from apr.toml and the built-in models. Kept apart from the engine
(numpy, the runtime) so that `apr inspect demo` resolves `demo` without importing them.

    path = resolve_model("demo")
"""
from __future__ import annotations

import os

from apr_core.errors import AprError, ErrorCode


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


__all__ = ["resolve_model"]
