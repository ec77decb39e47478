"""Checks of single JSON fields of a request body; each failure names its field (`param`)."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from .errors import ApiError

Json = Dict[str, Any]


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(body: Json, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(key, "'{}' must be a number".format(key))
    if not low <= value <= high:
        raise bad(key, "'{}' must be between {} and {}".format(key, low, high))
    return float(value)


def integer(body: Json, key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if not is_int(value):
        raise bad(key, "'{}' must be an integer".format(key))
    if not low <= value <= high:
        raise bad(key, "'{}' must be between {} and {}".format(key, low, high))
    return value


def flag(body: Json, key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(key, "'{}' must be a boolean".format(key))
    return value


def unsupported(body: Json, key: str, allowed: Tuple[Any, ...] = (None,)) -> None:
    if body.get(key) not in allowed:
        raise ApiError(400, "'{}' is not supported by this server".format(key), param=key,
                       code="unsupported_parameter")


__all__ = ["Json", "bad", "flag", "integer", "is_int", "number", "unsupported"]
