"""The Python half of a worker bundle's JavaScript entry point (worker.mjs): one call per
request, its answer as JSON text; a streamed answer is kept here and pulled a chunk at a
time.

    serve()          -> {"status", "body"} or {"stream": id}     (reads js.aprCall)
    next_chunk(id)   -> the next server-sent event's text, or null at the end
    cancel(id)       -> null (the client went away: the generation stops)

This file is apr_native/compile/worker_bundle/js_entry.py; in the bundle it is
`apr_worker/js_entry.py`.
"""
import json
from typing import Any, Dict, Iterator

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

from apr_core.errors import AprError
from apr_worker import api

_streams: Dict[int, Iterator[str]] = {}
_ids = [0]


async def serve() -> str:
    """Answer the request worker.mjs put in `js.aprCall` (method, url, body, env)."""
    call = js.aprCall
    status, answer = await api.handle(str(call.method), str(call.url), str(call.body),
                                      call.env)
    if isinstance(answer, dict):
        return json.dumps({"status": status, "body": answer})
    _ids[0] += 1
    _streams[_ids[0]] = iter(answer)
    return json.dumps({"stream": _ids[0]})


async def next_chunk(stream_id: int) -> str:
    events = _streams.get(stream_id)
    if events is None:
        return "null"
    try:
        return json.dumps(next(events))
    except StopIteration:
        del _streams[stream_id]
        return "null"
    except Exception as exc:   # a failure mid-stream: one error event, then the end
        del _streams[stream_id]
        if isinstance(exc, AprError):
            error = api.from_apr_error(exc).body()
        else:
            error = {"error": {"message": str(exc), "type": "server_error", "param": None,
                               "code": "worker_error"}}
        return json.dumps("data: {}\n\n".format(json.dumps(error)))


def cancel(stream_id: int) -> str:
    events = _streams.pop(stream_id, None)
    if events is not None and hasattr(events, "close"):
        events.close()
    return "null"
