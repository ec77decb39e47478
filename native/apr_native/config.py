"""User configuration (seed 000 §8, appendix B): config.toml, cache dir, log level, colour.

    settings()            -> dict from `APR_CONFIG` or ~/.config/apr/config.toml ({} if absent)
    setting(section, key, default)
    cache_dir()           -> `APR_CACHE`, else ~/.cache/apr
    models_dir()          -> cache_dir()/models: where `apr import` without -o writes
    log_level()           -> `APR_LOG_LEVEL`, else [defaults] log_level, else "info"
    color_enabled(tty)    -> `APR_COLOR` (always|never|auto), NO_COLOR, [defaults] color
    wants_json(args)      -> --json, or [defaults] output_format = "json"
    notice(text)          -> "apr: TEXT" on stderr, unless APR_QUIET=1

A config file that exists but is not valid TOML is an error (AprError ARGUMENT), never
silently ignored: the user wrote it to change behaviour.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict

from apr_core.errors import AprError, ErrorCode


LOG_LEVELS = ("debug", "info", "warning", "error")


def cache_dir() -> Path:
    """`APR_CACHE`, else ~/.cache/apr (seed 000 appendix B)."""
    return Path(os.environ.get("APR_CACHE") or Path.home() / ".cache" / "apr")


def config_path() -> Path:
    return Path(os.environ.get("APR_CONFIG") or Path.home() / ".config" / "apr" / "config.toml")


def settings() -> Dict[str, Any]:
    """The parsed config file, or {} when there is none."""
    path = config_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read config: {}".format(exc.strerror),
                       path=str(path))
    if not data.strip():
        return {}
    try:
        return _toml().loads(data.decode("utf-8"))
    except (_toml().TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AprError(ErrorCode.ARGUMENT, "config file is not valid TOML: {}".format(exc),
                       path=str(path))


def _toml() -> Any:
    """The TOML parser, imported when a config file is there to parse."""
    try:
        import tomllib
    except ImportError:     # Python 3.10: the same parser from PyPI
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def setting(section: str, key: str, default: Any = None) -> Any:
    table = settings().get(section)
    return table.get(key, default) if isinstance(table, dict) else default


def models_dir() -> Path:
    return cache_dir() / "models"


def log_level() -> str:
    level = (os.environ.get("APR_LOG_LEVEL") or setting("defaults", "log_level") or "info")
    level = str(level).lower()
    return level if level in LOG_LEVELS else "info"


def color_enabled(is_tty: bool) -> bool:
    mode = os.environ.get("APR_COLOR", "auto").lower()
    if mode in ("always", "1", "true", "yes"):
        return True
    if mode in ("never", "0", "false", "no") or os.environ.get("NO_COLOR"):
        return False
    return bool(setting("defaults", "color", True)) and is_tty


def wants_json(args: Any) -> bool:
    return bool(getattr(args, "json", False)) or \
        str(setting("defaults", "output_format", "text")).lower() == "json"


def notice(text: str) -> None:
    """One line on stderr about a wait or a one-time step (compiling kernels), so a long
    pause is never silent. Unlike progress bars (which redraw, so only on a terminal) it
    is printed piped too, as the CLI's other notes are; APR_QUIET=1 silences it."""
    if os.environ.get("APR_QUIET") != "1":
        print("apr: " + text, file=sys.stderr, flush=True)


__all__ = ["settings", "setting", "cache_dir", "models_dir", "log_level", "color_enabled",
           "wants_json", "config_path", "notice"]
