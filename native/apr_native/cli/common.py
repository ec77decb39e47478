"""What every command shares: model resolution, output, error -> exit code (seed 000 app. A)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from apr_core.errors import AprError, ErrorCode



def resolve_model(target: Any, *args: Any, **kwargs: Any) -> Any:
    """`model_names.resolve_model` (every command resolves here); references, apr.toml
    and the built-in models are imported only for names that are not an existing path."""
    if isinstance(target, str) and os.path.exists(target) and not args and not kwargs:
        return target
    from ..model_names import resolve_model as resolve
    return resolve(target, *args, **kwargs)

EXIT_OK, EXIT_GENERAL, EXIT_ARGS, EXIT_NOT_FOUND, EXIT_FORMAT, EXIT_VALIDATION = 0, 1, 2, 3, 4, 5


def quiet() -> bool:
    """Progress and colour are off when stdout is not a terminal or APR_QUIET=1."""
    return os.environ.get("APR_QUIET") == "1" or not sys.stderr.isatty()


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def check_output(path: str, force: bool) -> None:
    """Overwrite protection for every writing command: refuse an existing output unless
    `-f/--force` (seed 000 §11 #97). Writers also refuse atomically; this fails before
    any work is done."""
    if not force and os.path.lexists(path):
        raise AprError(ErrorCode.ARGUMENT, "output exists (use -f/--force to overwrite)",
                       path=path)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return "{:.1f} {}".format(n, unit) if unit != "B" else "{} B".format(int(n))
        n /= 1024.0
    return str(n)


def parse_size(text: str) -> int:
    """'512M', '2G', '1000' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().rstrip("B").rstrip("I")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise AprError(ErrorCode.ARGUMENT, "not a size (e.g. 512M, 2G)", value=text)
