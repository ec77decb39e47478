"""A job's events -> an HTTP response: Server-Sent Events, or one JSON body.

Both paths watch the connection while they wait: when the client disconnects (ASGI
`http.disconnect`), the job is cancelled, so its generation stops at the next token or, if
it is still queued, never starts. The streamed response sends its status line only once the
first event is in, so anything that fails before the first token (a bad prompt, a
prompt too long) is still a proper 4xx JSON error rather than a broken 200 stream.
"""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing
from typing import Any, AsyncIterator, List, Optional

from starlette.responses import JSONResponse

from .engine import Failed, Finished, Job
from .errors import ApiError, error_response
from .metrics import Metrics
from .openai_format import Completion
from .work import Delta, Outcome

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client disconnected before its response was complete."""


def gone_response() -> JSONResponse:
    """What a handler returns for a client that left: nobody reads it, but the access log
    and the metrics show 499 (nginx's "client closed request") instead of a success."""
    return JSONResponse({}, status_code=499)


async def _disconnected(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def job_events(job: Job, receive: Any) -> AsyncIterator[Any]:
    """The job's events up to (not including) `Finished`; `Failed` raises its ApiError, a
    disconnect raises ClientGone. Leaving early, for any reason, cancels the job."""
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        while True:
            getter = asyncio.ensure_future(job.events.get())
            done, _ = await asyncio.wait({getter, watcher},
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                raise ClientGone()
            event = getter.result()
            if isinstance(event, Finished):
                return
            if isinstance(event, Failed):
                raise event.error
            yield event
    finally:
        watcher.cancel()
        job.cancel()


class Tracker:
    """Text, outcome and metrics of one generation as its events arrive."""

    def __init__(self, metrics: Metrics, started: float) -> None:
        self.metrics = metrics
        self.started = started
        self.text: List[str] = []
        self.outcome: Optional[Outcome] = None

    def add(self, event: Any) -> None:
        if isinstance(event, Delta):
            if not self.text:
                self.metrics.ttft.observe(time.perf_counter() - self.started)
            self.text.append(event.text)
        elif isinstance(event, Outcome):
            self.outcome = event
            self.metrics.prompt_tokens.inc(event.prompt_tokens)
            self.metrics.completion_tokens.inc(event.completion_tokens)


async def collect(job: Job, receive: Any, completion: Completion, metrics: Metrics,
                  started: float) -> Any:
    """The whole response as one JSON body (a non-streaming request)."""
    tracker = Tracker(metrics, started)
    try:
        async with aclosing(job_events(job, receive)) as events:
            async for event in events:
                tracker.add(event)
    except ClientGone:
        return gone_response()
    out = tracker.outcome
    if out is None:
        raise ApiError(500, "generation ended without a result")
    return JSONResponse(completion.response("".join(tracker.text), out.finish_reason,
                                            out.prompt_tokens, out.completion_tokens))


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode("utf-8") + b"\n\n"


class EventStream:
    """ASGI response streaming a generation in OpenAI's chunk format, ending `[DONE]`."""

    def __init__(self, job: Job, completion: Completion, metrics: Metrics, started: float,
                 include_usage: bool) -> None:
        self.job = job
        self.completion = completion
        self.tracker = Tracker(metrics, started)
        self.include_usage = include_usage

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with aclosing(job_events(self.job, receive)) as events:
            try:
                first = await events.__anext__()
            except ApiError as err:
                await error_response(err)(scope, receive, send)
                return
            except (ClientGone, StopAsyncIteration):
                return
            try:
                await self._stream(first, events, send)
            except (ClientGone, OSError):
                return      # the client left (OSError: uvicorn's send after a disconnect)

    async def _stream(self, first: Any, events: AsyncIterator[Any], send: Any) -> None:
        async def body(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        opening = self.completion.first_chunk()
        if opening is not None:
            await body(_sse(opening))
        event: Any = first
        try:
            while True:
                self.tracker.add(event)
                if isinstance(event, Delta) and event.text:
                    await body(_sse(self.completion.chunk(event.text)))
                elif isinstance(event, Outcome):
                    await body(_sse(self.completion.final_chunk(event.finish_reason)))
                    if self.include_usage:
                        await body(_sse(self.completion.usage_chunk(
                            event.prompt_tokens, event.completion_tokens)))
                event = await events.__anext__()
        except StopAsyncIteration:
            pass
        except ApiError as err:     # after the 200: OpenAI's way is an error event
            await body(_sse(err.body()))
        await body(b"data: [DONE]\n\n", more=False)


__all__ = ["ClientGone", "EventStream", "Tracker", "collect", "gone_response", "job_events"]
