"""Where the browser shell's sources are: `web/` of this checkout (the shell's server and
the native build of its kernels both read from there)."""
from __future__ import annotations

import os


def web_root() -> str:
    """The `web/` directory of this checkout (APR_WEB_ROOT overrides)."""
    env = os.environ.get("APR_WEB_ROOT")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.abspath(os.path.join(here, "..", "..", "web"))
