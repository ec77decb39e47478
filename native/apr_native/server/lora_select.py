"""A request's `lora` field: which of the adapters loaded at start (`apr serve --lora`)
apply to it, at what scale, as llama-server's `"lora": [{"id": 0, "scale": 0.5}]`.

Adapters are named by `id` (their position among the `--lora` options) or by `path` (as
given on the command line); one left out of a request's list gets scale 0 (llama-server's
rule), a request without the field keeps the startup scales. The weights of one decode
step are shared by every sequence in it, so the engine thread runs requests with other
scales only once the running ones are done (`ServingEngine`); the prefix cache is off when
adapters are loaded, since a cached prefix's K/V depend on the scales."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

from .errors import ApiError

Scales = Tuple[float, ...]


def _refuse(message: str) -> ApiError:
    return ApiError(400, message, param="lora", code="invalid_lora")


def request_scales(body: dict, paths: Sequence[str]) -> Optional[Scales]:
    """The scales the request's `lora` field asks for, one per loaded adapter, or None
    when it has no such field; 400 `invalid_lora` for an unknown adapter or a bad value."""
    field = body.get("lora")
    if field is None:
        return None
    if not isinstance(field, list):
        raise _refuse("lora must be a list of {id or path, scale} objects")
    if field and not paths:
        raise _refuse("this server was started without --lora adapters")
    scales = [0.0] * len(paths)
    for entry in field:
        if not isinstance(entry, dict):
            raise _refuse("each lora entry must be an object {id or path, scale}")
        index = _index(entry, paths)
        scale = entry.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
                not math.isfinite(scale):
            raise _refuse("lora scale must be a finite number")
        scales[index] = float(scale)
    return tuple(scales)


def _index(entry: dict, paths: Sequence[str]) -> int:
    if "id" in entry:
        index = entry["id"]
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < len(paths):
            raise _refuse("no loaded LoRA adapter has id {!r} (ids 0..{})".format(
                index, len(paths) - 1))
        return index
    if entry.get("path") in paths:
        return list(paths).index(entry["path"])
    raise _refuse("no loaded LoRA adapter has path {!r}".format(entry.get("path")))


def adapters_info(transformer: Any) -> list:
    """`[{id, path, scale}]` of the loaded adapters at their startup scales."""
    lora = getattr(transformer, "lora", None)
    if lora is None:
        return []
    return [{"id": i, "path": p, "scale": s}
            for i, (p, s) in enumerate(zip(lora.paths, lora.startup))]


__all__ = ["request_scales", "adapters_info", "Scales"]
