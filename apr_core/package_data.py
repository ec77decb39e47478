"""Files packaged inside apr_core (`apr_core/data/...`), read the way `pkgutil.get_data`
reads them (through the package's loader, so zip imports and Pyodide work) without
importing pkgutil, whose import is a few milliseconds of every `apr` start."""
from __future__ import annotations

import os
from typing import Optional


def read(resource: str) -> Optional[bytes]:
    """The bytes of `resource` ("data/contracts.json": '/'-separated, relative to the
    apr_core package), None when the loader cannot read files; OSError when it is absent."""
    import apr_core
    spec = getattr(apr_core, "__spec__", None)
    loader = getattr(spec, "loader", None)
    where = getattr(apr_core, "__file__", None)
    if loader is None or not hasattr(loader, "get_data") or where is None:
        return None
    return loader.get_data(os.path.join(os.path.dirname(where), *resource.split("/")))


__all__ = ["read"]
