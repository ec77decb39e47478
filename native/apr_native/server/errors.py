"""Errors as OpenAI's API reports them: an HTTP status and `{"error": {...}}`.

Clients (the official `openai` package among them) read `error.message`, `error.type`,
`error.param` and `error.code`, and pick the exception class from the status code, so every
refusal of the server goes through `ApiError` and `error_response`.
"""
from __future__ import annotations

from typing import Dict, Optional

from starlette.responses import JSONResponse

from apr_core.errors import AprError, ErrorCode

# HTTP status -> OpenAI error `type` (what their API sends for each class of failure).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               404: "invalid_request_error", 405: "invalid_request_error",
               413: "invalid_request_error", 429: "rate_limit_error",
               500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A request the server refuses: `status`, a one-line `message`, and optionally the
    offending `param` and a machine-readable `code`."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, headers: Optional[Dict[str, str]] = None
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message,
                          "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


def from_apr_error(err: AprError) -> ApiError:
    """Bad input found by apr_core (chat template, tokenizer, sampler, a prompt beyond the
    KV budget) -> 400; anything else the runtime raises is the server's fault -> 500."""
    client_side = err.code in (ErrorCode.ARGUMENT, ErrorCode.UNSUPPORTED, ErrorCode.VALIDATION,
                               ErrorCode.MEMORY)
    return ApiError(400 if client_side else 500, err.message,
                    code=err.code.category.lower())


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


__all__ = ["ApiError", "ERROR_TYPES", "error_response", "from_apr_error"]
