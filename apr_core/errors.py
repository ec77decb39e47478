"""The one table of error codes, and the exception every parser raises.

Codes E001-E008 are seed 000 §7; the rest extend it. Each code carries the CLI exit code
of seed 000 appendix A (0 ok, 1 general, 2 invalid arguments, 3 file not found,
4 format error, 5 validation failed).
"""
from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """(category, description, CLI exit code) per code."""

    E001 = ("FORMAT", "Invalid file format", 4)
    E002 = ("CORRUPT", "Corrupted data", 4)
    E003 = ("VERSION", "Unsupported version", 4)
    E004 = ("CHECKSUM", "Checksum mismatch", 5)
    E005 = ("DECRYPT", "Decryption failed", 5)
    E006 = ("SIGNATURE", "Signature invalid", 5)
    E007 = ("IO", "File I/O error", 3)
    E008 = ("MEMORY", "Out of memory or size limit exceeded", 1)
    E009 = ("UNSUPPORTED", "Unsupported feature, dtype or codec", 4)
    E010 = ("NOT_FOUND", "Tensor or key not found", 2)
    E011 = ("ARGUMENT", "Invalid argument", 2)
    E012 = ("VALIDATION", "Validation failed", 5)
    # Models by reference (hf://, URLs): exit 3 is seed 000 §4.15.8's "network error".
    E013 = ("NETWORK", "Network or remote repository error", 3)
    E014 = ("AUTH", "Authentication required", 3)
    E015 = ("OFFLINE", "Not in the cache and offline", 3)
    # Saved state (a session's KV cache) made for another model, KV type or context.
    E016 = ("MISMATCH", "Saved state does not fit this model or its settings", 5)

    @property
    def category(self) -> str:
        return self.value[0]

    @property
    def description(self) -> str:
        return self.value[1]

    @property
    def exit_code(self) -> int:
        return self.value[2]


# Readable aliases: `ErrorCode.FORMAT` is `ErrorCode.E001`.
for _code in list(ErrorCode):
    setattr(ErrorCode, _code.category, _code)


class AprError(Exception):
    """An error with a code from `ErrorCode` and the context that explains it.

    `AprError(ErrorCode.CORRUPT, "tensor offset beyond end of file", tensor="w", offset=99)`
    """

    def __init__(self, code: ErrorCode, message: str, **context: object) -> None:
        self.code = code
        self.message = message
        self.context = context
        super().__init__(str(self))

    def __str__(self) -> str:
        extra = ", ".join("{}={!r}".format(k, v) for k, v in sorted(self.context.items()))
        text = "{} {}: {}".format(self.code.name, self.code.category, self.message)
        return text + (" ({})".format(extra) if extra else "")

    @property
    def exit_code(self) -> int:
        return self.code.exit_code

    def to_dict(self) -> dict:
        """JSON-friendly form for `--json` output."""
        return {
            "code": self.code.name,
            "category": self.code.category,
            "message": self.message,
            "context": {k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
                        for k, v in self.context.items()},
        }


def check(condition: bool, code: ErrorCode, message: str, **context: object) -> None:
    """Raise `AprError(code, message, **context)` unless `condition` holds."""
    if not condition:
        raise AprError(code, message, **context)
