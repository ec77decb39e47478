"""A job's events -> an HTTP response: Server-Sent Events, or one JSON body.

Both paths watch the connection while they wait: when the client disconnects (ASGI
`http.disconnect`), the job is cancelled, so its sequences leave the running batch at the
next step and their KV blocks are freed; if still queued, it never starts. The streamed
response sends its status line only once the first event is in, so anything that fails
before the first token (a prompt too long for the KV budget, ...) is still a proper 4xx
JSON error rather than a broken 200 stream.
"""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing
from typing import Any, AsyncIterator, Optional

from starlette.responses import JSONResponse

from apr_core.runtime.batching.request import ErrorEvent, FinishEvent, TokenEvent
from apr_core.errors import AprError

from .choices import RequestTracker
from .engine import Done, Job
from .errors import ApiError, error_response, from_apr_error
from .metrics import Metrics
from .openai_format import Completion

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client disconnected before its response was complete."""


def gone_response() -> JSONResponse:
    """What a handler returns for a client that left: nobody reads it, but the access log
    and the metrics show 499 (nginx's "client closed request") instead of a success."""
    return JSONResponse({}, status_code=499)


def api_error(err: BaseException) -> ApiError:
    if isinstance(err, ApiError):
        return err
    if isinstance(err, AprError):
        return from_apr_error(err)
    return ApiError(500, "generation failed: {}".format(err))


async def _disconnected(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def job_events(job: Job, receive: Any, metrics: Metrics) -> AsyncIterator[Any]:
    """The job's Token/FinishEvents up to `Done`; an ErrorEvent raises its ApiError, a
    disconnect raises ClientGone. Leaving early, for any reason, cancels the job."""
    watcher = asyncio.ensure_future(_disconnected(receive))
    complete = False
    try:
        while True:
            getter = asyncio.ensure_future(job.events.get())
            done, _ = await asyncio.wait({getter, watcher},
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                raise ClientGone()
            event = getter.result()
            if isinstance(event, Done):
                complete = True
                return
            if isinstance(event, ErrorEvent):
                complete = True
                raise api_error(event.error)
            yield event
    finally:
        watcher.cancel()
        if not complete:
            metrics.cancelled.inc()
            job.cancel()


class Recorder:
    """The request's tracker plus its metrics (time to first token, token counts)."""

    def __init__(self, tracker: RequestTracker, metrics: Metrics, started: float) -> None:
        self.tracker = tracker
        self.metrics = metrics
        self.started = started
        self.first = True

    def token(self, event: TokenEvent) -> Any:
        if self.first:
            self.first = False
            self.metrics.ttft.observe(time.perf_counter() - self.started)
        return self.tracker.choices[event.index].token(event)

    def finish(self, event: FinishEvent) -> Any:
        out = self.tracker.finish(event)
        if self.tracker.finished == len(self.tracker.choices):
            self.metrics.prompt_tokens.inc(self.tracker.prompt_tokens)
            self.metrics.completion_tokens.inc(self.tracker.completion_tokens)
        return out


async def collect(job: Job, receive: Any, completion: Completion, recorder: Recorder
                  ) -> Any:
    """The whole response as one JSON body (a non-streaming request)."""
    try:
        async with aclosing(job_events(job, receive, recorder.metrics)) as events:
            async for event in events:
                if isinstance(event, TokenEvent):
                    recorder.token(event)
                else:
                    recorder.finish(event)
    except ClientGone:
        return gone_response()
    tracker = recorder.tracker
    if tracker.finished < len(tracker.choices):
        raise ApiError(500, "generation ended without a result")
    return JSONResponse(completion.response(tracker.results(), tracker.usage()))


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode("utf-8") + b"\n\n"


class EventStream:
    """ASGI response streaming a generation in OpenAI's chunk format, ending `[DONE]`."""

    def __init__(self, job: Job, completion: Completion, recorder: Recorder,
                 include_usage: bool) -> None:
        self.job = job
        self.completion = completion
        self.recorder = recorder
        self.include_usage = include_usage
        self.offsets = [0] * len(recorder.tracker.choices)   # text sent per choice

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with aclosing(job_events(self.job, receive, self.recorder.metrics)) as events:
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

    def _chunks(self, event: Any) -> Any:
        """The chunks one event becomes."""
        c = self.completion
        if isinstance(event, TokenEvent):
            text, entry = self.recorder.token(event)
            if text or entry is not None:
                logprobs = c.logprobs([entry] if entry is not None else None,
                                      self.offsets[event.index])
                self.offsets[event.index] += len(text)
                yield c.chunk(event.index, text, logprobs)
            return
        tail, calls, reason = self.recorder.finish(event)
        if tail:
            yield c.chunk(event.index, tail)
        if calls:
            yield c.chunk(event.index, None, tool_calls=calls)
        yield c.chunk(event.index, None, finish=reason)

    async def _stream(self, first: Any, events: AsyncIterator[Any], send: Any) -> None:
        async def body(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        for opening in self.completion.first_chunks(len(self.offsets)):
            await body(_sse(opening))
        event: Optional[Any] = first
        try:
            while True:
                for chunk in self._chunks(event):
                    await body(_sse(chunk))
                event = await events.__anext__()
        except StopAsyncIteration:
            if self.include_usage:
                await body(_sse(self.completion.usage_chunk(self.recorder.tracker.usage())))
        except ApiError as err:     # after the 200: OpenAI's way is an error event
            await body(_sse(err.body()))
        await body(b"data: [DONE]\n\n", more=False)


__all__ = ["ClientGone", "EventStream", "Recorder", "api_error", "collect", "gone_response",
           "job_events"]
