"""The model and its one worker thread: jobs queue here and run one at a time.

Generation is CPU bound (numpy releases the GIL in its kernels, Python between them does
not), so it runs off the event loop in a single worker thread, and the loop stays free to
accept requests, stream tokens and answer /health. A job is a function of the loaded
`TextModel`; it reports through `Job.emit`, which hands each event to the job's asyncio
queue on the loop's thread. A client that goes away sets `Job.cancel()`: a queued job is
then skipped and a running one stops at its next token, so the next request starts promptly.
The queue is bounded: when it is full `submit` refuses with 429 at once instead of
letting waits grow without limit.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from apr_core.errors import AprError

from .errors import ApiError, from_apr_error

Work = Callable[[Any, "Job"], None]


class Job:
    """One request's work and the channel its events come back through."""

    def __init__(self, work: Work, loop: asyncio.AbstractEventLoop) -> None:
        self.work = work
        self.loop = loop
        self.events: "asyncio.Queue[Any]" = asyncio.Queue()
        self.created = time.perf_counter()
        self._cancelled = threading.Event()

    def emit(self, event: Any) -> None:
        """Called from the worker thread; delivers `event` on the loop's thread."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:        # the loop is closed: nobody is listening any more
            self.cancel()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class Failed:
    """The event a job ends with when its work raised."""

    def __init__(self, error: ApiError) -> None:
        self.error = error


class Finished:
    """The event every job ends with on success (its own events come before it)."""


class Engine:
    """Loads `path` in the worker thread (so the server answers /health and /ready at once)
    and runs submitted jobs one at a time, at most `max_queue` waiting."""

    def __init__(self, path: str, model_id: str, dequantize: bool = False,
                 max_queue: int = 64) -> None:
        self.path = path
        self.model_id = model_id
        self.dequantize = dequantize
        self.model: Any = None
        self.load_error: Optional[str] = None
        self.load_seconds: Optional[float] = None
        self.created = int(time.time())
        self._jobs: "queue.Queue[Optional[Job]]" = queue.Queue(maxsize=max_queue)
        self._ready = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.busy = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="apr-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Cancel what is queued and let the worker finish (it exits after its job)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.emit(Failed(ApiError(503, "server is shutting down")))
        try:
            self._jobs.put_nowait(None)
        except queue.Full:
            pass

    def wait_ready(self, timeout: Optional[float] = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.model is not None

    @property
    def queue_depth(self) -> int:
        """Jobs waiting plus the one running."""
        return self._jobs.qsize() + (1 if self.busy else 0)

    # ------------------------------------------------------------------ submitting

    def submit(self, work: Work) -> Job:
        """Queue `work(model, job)`; 503 while loading (or if loading failed), 429 when full."""
        if not self.ready:
            raise ApiError(503, self.load_error or "model is still loading",
                           code="model_not_ready", headers={"Retry-After": "1"})
        job = Job(work, asyncio.get_running_loop())
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise ApiError(429, "the request queue is full; retry later",
                           code="queue_full", headers={"Retry-After": "1"})
        return job

    # ------------------------------------------------------------------ worker thread

    def _run(self) -> None:
        from apr_core.pipeline import TextModel
        start = time.perf_counter()
        try:
            self.model = TextModel.load(self.path, dequantize_at_load=self.dequantize)
            self.load_seconds = time.perf_counter() - start
        except Exception as err:    # whatever it was, /ready must say so, not hang
            self.load_error = "model failed to load: {}".format(err)
            logging.getLogger("apr.server").error("%s", self.load_error)
        self._ready.set()
        if self.model is None:
            return
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.cancelled:
                continue
            self.busy = True
            try:
                job.work(self.model, job)
                job.emit(Finished())
            except AprError as err:
                job.emit(Failed(from_apr_error(err)))
            except ApiError as err:
                job.emit(Failed(err))
            except Exception as err:  # a bug must fail its request, never the worker
                job.emit(Failed(ApiError(500, "internal error: {}: {}".format(
                    type(err).__name__, err))))
            finally:
                self.busy = False


__all__ = ["Engine", "Failed", "Finished", "Job"]
