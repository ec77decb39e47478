"""What `apr inspect` says about a chat template, remembered across processes.

Describing a template (`apr_core.text.chat_probe.describe_template`) renders the probe
conversations through the sandboxed Jinja and compares it with every built-in renderer:
importing jinja2 and ~40 renders are about half of an `apr inspect`. The answer depends
only on the template text, the BOS/EOS strings and the code that renders and compares
them, so it is kept in `$APR_CACHE/templates/<crc32><adler32>.json` with all of those
written in the entry, and used only when they are equal to the ones asked about (the name
is a checksum, not a trusted key: no hashlib import, ~2 ms of a start; the sources of
`apr_core.text.chat*` are part of the key: an edited renderer invalidates every entry). Only deterministic answers are kept: a template that passed the probe or has none;
a failure (which may be a wall-clock limit) is described afresh every time. A cache entry
that is unreadable or not what this module writes is ignored and rewritten.
"""
from __future__ import annotations

import json
import os
import zlib
from typing import Any, Dict, List, Optional, Tuple

from apr_core.errors import AprError

from .config import cache_dir

_FIELDS = ("present", "chars", "family", "builtin", "check")
Key = List[str]
_SOURCES = ("chat.py", "chat_probe.py", "chat_sandbox.py")
_code_key: Optional[str] = None


def _code_version() -> str:
    """CRC32 of the sources whose behaviour a description records (read once)."""
    global _code_key
    if _code_key is None:
        import apr_core     # (not apr_core.text: its package imports the tokenizer)
        folder = os.path.join(os.path.dirname(apr_core.__file__), "text")
        crc = 0
        for name in _SOURCES:
            with open(os.path.join(folder, name), "rb") as handle:
                crc = zlib.crc32(handle.read(), crc)
        _code_key = "{:08x}".format(crc)
    return _code_key


def entry_path(template: str, bos_token: str, eos_token: str) -> Tuple[str, Key]:
    """(the entry's file, the key written in it)."""
    key = [_code_version(), template, bos_token, eos_token]
    data = json.dumps(key).encode("utf-8", "surrogatepass")
    name = "{:08x}{:08x}.json".format(zlib.crc32(data), zlib.adler32(data))
    return os.path.join(str(cache_dir()), "templates", name), key


def _load(path: str, key: Key) -> Optional[Dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
            entry = json.loads(handle.read(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None                       # another template with the same checksum
    value = entry.get("info")
    if not isinstance(value, dict) or sorted(value) != sorted(_FIELDS) \
            or value.get("check") != "ok":
        return None
    return value


def describe(template: Optional[str], bos_token: str = "", eos_token: str = ""
             ) -> Dict[str, Any]:
    """`describe_template(template, bos, eos)`, from the cache when it was made before
    (a hit imports no renderer: jinja2 and the chat modules only on a miss)."""
    if template:
        path, key = entry_path(template, bos_token, eos_token)
        cached = _load(path, key)
        if cached is not None:
            return cached
    from apr_core.text.chat_probe import describe_template
    info = describe_template(template, bos_token, eos_token)
    if not template:
        return info
    if info.get("check") == "ok":
        from apr_core.atomic import atomic_output    # (tempfile, shutil: only on a miss)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_output(path) as handle:
                handle.write(json.dumps({"key": key, "info": info}, sort_keys=True)
                             .encode("utf-8", "surrogatepass"))
        except (OSError, AprError):     # a read-only cache only costs the next run time
            pass
    return info
