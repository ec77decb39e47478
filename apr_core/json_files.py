"""THE bounded JSON reader: every JSON document apr reads from a file or from a model's
bytes (SafeTensors headers, shard indexes, APR metadata, config.json, tokenizer.json,
side files, canaries, tensor maps) goes through `parse_json` or `read_json_file`, so a
hostile or broken one always ends in the same coded errors.

    parse_json(data, "header", strict=True)      # bytes -> value
    read_json_file(path, "config.json")          # a file, at most MAX_JSON_FILE bytes
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

from .errors import AprError, ErrorCode

# The largest real JSON side files (tokenizer.json) are ~30 MiB.
MAX_JSON_FILE = 256 << 20


def parse_json(data: bytes, what: str, strict: bool = False, want_object: bool = True) -> Any:
    """Decode UTF-8 JSON `data` (AprError FORMAT when it is not). `strict` also rejects
    duplicate keys and NaN/Infinity (what serde accepts: SafeTensors headers); with
    `want_object` the document must be a JSON object."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AprError(ErrorCode.FORMAT, "{} is not valid UTF-8".format(what),
                       position=exc.start)
    hooks: Dict[str, Any] = {}
    if strict:
        hooks = {"object_pairs_hook": _unique_object, "parse_constant": _reject_constant}
    try:
        value = json.loads(text, **hooks)
    except AprError:
        raise
    except RecursionError:
        raise AprError(ErrorCode.FORMAT, "{} is JSON nested too deeply".format(what))
    except ValueError as exc:  # JSONDecodeError, and int-digit limits on Python >= 3.11
        raise AprError(ErrorCode.FORMAT, "{} is not valid JSON: {}".format(what, exc))
    if want_object and not isinstance(value, dict):
        raise AprError(ErrorCode.FORMAT, "{} is not a JSON object".format(what),
                       type=type(value).__name__)
    return value


def read_json_file(path: str, what: str = "", limit: int = MAX_JSON_FILE,
                   strict: bool = False, want_object: bool = True) -> Any:
    """`parse_json` of a file of at most `limit` bytes: AprError NOT_FOUND when it is
    absent, IO when unreadable, MEMORY when larger than `limit`."""
    what = what or os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise AprError(ErrorCode.MEMORY, "{} is implausibly large".format(what),
                               path=path, size=size, limit=limit)
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise AprError(ErrorCode.NOT_FOUND, "no {}".format(what), path=path)
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read {}".format(what), path=path,
                       reason=exc.strerror)
    if len(data) > limit:  # grew while we read it
        raise AprError(ErrorCode.MEMORY, "{} is implausibly large".format(what), path=path,
                       limit=limit)
    return parse_json(data, what, strict, want_object)


def short(text: str, limit: int = 120) -> str:
    """Clip long names in error context so a hostile document cannot flood a message."""
    return text if len(text) <= limit else text[:limit] + "..."


def _unique_object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise AprError(ErrorCode.FORMAT, "duplicate key in JSON object", key=short(key))
        result[key] = value
    return result


def _reject_constant(token: str) -> Any:
    raise AprError(ErrorCode.FORMAT, "NaN/Infinity are not valid JSON", token=token)


__all__ = ["parse_json", "read_json_file", "short", "MAX_JSON_FILE"]
