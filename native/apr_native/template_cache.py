"""What `apr inspect` says about a chat template, remembered across processes.

Describing a template (`apr_core.text.chat_probe.describe_template`) renders the probe
conversations through the sandboxed Jinja and compares it with every built-in renderer:
importing jinja2 and ~40 renders are about half of an `apr inspect`. The answer depends
only on the template text, the BOS/EOS strings and the code that renders and compares
them, so it is kept in `$APR_CACHE/templates/<sha256>.json` under a key made of all of
those (the sources of `apr_core.text.chat*` included: an edited renderer invalidates every
entry). Only deterministic answers are kept: a template that passed the probe or has none;
a failure (which may be a wall-clock limit) is described afresh every time. A cache entry
that is unreadable or not what this module writes is ignored and rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Optional

from apr_core.errors import AprError

from .config import cache_dir

_FIELDS = ("present", "chars", "family", "builtin", "check")
_SOURCES = ("chat.py", "chat_probe.py", "chat_sandbox.py")
_code_key: Optional[str] = None


def _code_version() -> str:
    """sha256 of the sources whose behaviour a description records (read once)."""
    global _code_key
    if _code_key is None:
        import apr_core.text as text
        digest = hashlib.sha256()
        for name in _SOURCES:
            with open(os.path.join(os.path.dirname(text.__file__), name), "rb") as handle:
                digest.update(handle.read())
        _code_key = digest.hexdigest()
    return _code_key


def entry_path(template: str, bos_token: str, eos_token: str) -> str:
    key = hashlib.sha256(json.dumps([_code_version(), template, bos_token, eos_token])
                         .encode("utf-8", "surrogatepass")).hexdigest()
    return os.path.join(str(cache_dir()), "templates", key + ".json")


def _load(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(_FIELDS) \
            or value.get("check") != "ok":
        return None
    return value


def describe(template: Optional[str], bos_token: str = "", eos_token: str = ""
             ) -> Dict[str, Any]:
    """`describe_template(template, bos, eos)`, from the cache when it was made before."""
    from apr_core.text.chat_probe import describe_template
    if not template:
        return describe_template(template, bos_token, eos_token)
    path = entry_path(template, bos_token, eos_token)
    cached = _load(path)
    if cached is not None:
        return cached
    info = describe_template(template, bos_token, eos_token)
    if info.get("check") == "ok":
        from apr_core.atomic import atomic_output    # (tempfile, shutil: only on a miss)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_output(path) as handle:
                handle.write(json.dumps(info, sort_keys=True).encode())
        except (OSError, AprError):     # a read-only cache only costs the next run time
            pass
    return info
