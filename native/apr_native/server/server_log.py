"""The server's log on stderr: the address it listens on, the model it loaded (with the
sampling defaults requests get), and one line per request.

    log = ServerLog("json")
    log.listening("http://127.0.0.1:8080", "demo")
    log.request("127.0.0.1", "POST", "/v1/chat/completions", 200, 31, 7, 0.84)

`text` lines are for people (`apr serve: 127.0.0.1 POST /v1/chat/completions 200
prompt_tokens=31 completion_tokens=7 0.840 s`); `json` writes one JSON object per line
(`event`, `time` and the fields) for log shippers; `off` writes nothing. The probes
(/health, /ready) are not logged: load balancers poll them every few seconds, and
llama-server leaves /health out likewise. This log is the server's output, not progress:
APR_QUIET and a stderr that is not a terminal leave it on (a server under systemd or
docker is exactly where it is read).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, TextIO, Tuple

from apr_core.errors import AprError, ErrorCode

FORMATS = ("text", "json", "off")
UNLOGGED_PATHS = frozenset({"/health", "/ready"})
PREFIX = "apr serve: "
USAGE_KEY = "apr_usage"         # the ASGI scope's "state" entry a handler leaves its usage in

Usage = Callable[[], Tuple[Optional[int], Optional[int]]]   # -> (prompt, completion) tokens


def note_usage(scope: Dict[str, Any], usage: Usage) -> None:
    """Leave a request's token counts for its log line; `usage` is called once the
    response is complete (a streamed one counts its tokens while it is sent)."""
    scope.setdefault("state", {})[USAGE_KEY] = usage


def _now() -> str:
    """UTC, ISO 8601 with milliseconds."""
    stamp = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + \
        ".{:03d}Z".format(int(stamp % 1 * 1000))


class ServerLog:
    """Writes the server's events in one format; safe to call from any thread."""

    def __init__(self, fmt: str = "text", stream: Optional[TextIO] = None) -> None:
        if fmt not in FORMATS:
            raise AprError(ErrorCode.ARGUMENT, "--log-format {} is not one of {}".format(
                fmt, ", ".join(FORMATS)), value=fmt)
        self.fmt = fmt
        self.stream = stream
        self._lock = threading.Lock()

    def _write(self, event: str, text: str, fields: Dict[str, Any]) -> None:
        if self.fmt == "off":
            return
        if self.fmt == "json":
            line = json.dumps(dict({"time": _now(), "event": event}, **fields),
                              separators=(",", ":"), default=str)
        else:
            line = PREFIX + text
        stream = self.stream or sys.stderr      # looked up late: tests swap sys.stderr
        with self._lock:
            stream.write(line + "\n")
            stream.flush()

    def listening(self, url: str, model: str, note: str = "") -> None:
        """The server is bound to `url`; the model may still be loading."""
        self._write("listening", "listening on {} (model {}){}".format(url, model, note),
                    {"url": url, "model": model})

    def loaded(self, model: str, seconds: float, details: Dict[str, Any],
               sampling: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
        """The model is loaded; `details` (backend, batch, KV ...) and the sampling
        defaults (`SamplingDefaults.report()`) are shown as they are."""
        text = "loaded {} in {:.1f} s; {}".format(model, seconds, ", ".join(
            "{} {}".format(key.replace("_", " "), value) for key, value in details.items()))
        if sampling is not None:
            text += "; sampling defaults: " + ", ".join(
                "{}={} ({})".format(name, value, sampling["sources"][name])
                for name, value in sampling["params"].items())
        fields = dict({"model": model, "seconds": round(seconds, 3)}, **details)
        if sampling is not None:
            fields["sampling_defaults"] = sampling
        self._write("loaded", text, fields)

    def warning(self, message: str) -> None:
        self._write("warning", "warning: " + message, {"message": message})

    def error(self, message: str) -> None:
        self._write("error", "error: " + message, {"message": message})

    def request(self, client: Optional[str], method: str, path: str, status: int,
                prompt_tokens: Optional[int], completion_tokens: Optional[int],
                seconds: float) -> None:
        """One finished request (token counts None where nothing was generated)."""
        if path in UNLOGGED_PATHS:
            return
        tokens = "" if prompt_tokens is None else " prompt_tokens={} completion_tokens={}" \
            .format(prompt_tokens, completion_tokens)
        self._write("request", "{} {} {} {}{} {:.3f} s".format(
            client or "-", method, path, status, tokens, seconds),
            {"client": client, "method": method, "path": path, "status": status,
             "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "seconds": round(seconds, 4)})

    def scope_request(self, scope: Dict[str, Any], status: int, seconds: float) -> None:
        """`request` for an ASGI scope (with the usage a handler noted, if any)."""
        usage = scope.get("state", {}).get(USAGE_KEY)
        prompt, completion = usage() if usage is not None else (None, None)
        client = scope.get("client")
        self.request(client[0] if client else None, scope.get("method", ""),
                     scope.get("path", ""), status, prompt, completion, seconds)


__all__ = ["FORMATS", "ServerLog", "UNLOGGED_PATHS", "note_usage"]
