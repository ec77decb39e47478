"""The serving engine: one thread drives the continuous-batching scheduler; the event loop
submits requests and receives their events.

    engine = ServingEngine(path, "demo", EngineOptions(max_batch=16))
    engine.start()                          # loads in the engine thread
    job = engine.submit(GenerationRequest(ids, max_tokens=64))
    while not isinstance(event := await job.events.get(), Done): ...

The model, its kernels and the block pool are only ever touched by the engine thread (the
numba pool has one task descriptor; two forward passes at once would corrupt it). Other
threads talk to it through an inbox: submissions, cancellations and `run(fn)` calls are
taken between steps, so a request joins the running batch at the next step and a
cancelled one (client gone) frees its KV blocks at once. The inbox holds typed messages
(`Submit`, `Cancel`, `Call`). The waiting queue is bounded: `submit` refuses with 429 when
`max_queue` requests are already waiting. What other threads read about the scheduler
(`queue_depth`, `stats()`, `snapshot`) is an immutable `EngineStats` the engine thread
publishes after each step, never the scheduler itself.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from apr_core.errors import AprError
from apr_core.runtime.batching.request import ErrorEvent, FinishEvent, GenerationRequest
from apr_core.runtime.sampling_defaults import SamplingDefaults, read_recommended, resolve

from ..engine import Engine, EngineOptions, load_engine
from .engine_stats import RATE_WINDOW_S, EngineStats
from .errors import ApiError
from .server_log import ServerLog

IDLE_WAIT_S = 0.5           # the engine thread's sleep with nothing to do (woken on work)


class Done:
    """The last event of a job: every choice has finished (or it failed)."""


class Job:
    """One request's channel: events arrive on `events` (an asyncio queue)."""

    def __init__(self, engine: "ServingEngine", request: GenerationRequest,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.request = request
        self.n = request.n
        self.loop = loop
        self.events: "asyncio.Queue[Any]" = asyncio.Queue()
        self.created = time.perf_counter()
        self.state: Any = None          # the scheduler's RequestState (engine thread)
        self.lora: Any = None           # LoRA scales it asks for (lora_select), None: startup
        self.cancelled = False
        self._finished = 0

    def emit(self, event: Any) -> None:
        """Called on the engine thread: hand `event` to the loop (and `Done` after the
        last choice finished or an error)."""
        final = isinstance(event, ErrorEvent)
        if isinstance(event, FinishEvent):
            self._finished += 1
            final = self._finished >= self.n
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
            if final:
                self.loop.call_soon_threadsafe(self.events.put_nowait, Done())
        except RuntimeError:        # the loop is closed: nobody is listening any more
            self.cancel()

    def cancel(self) -> None:
        """Stop generating and free the KV blocks (idempotent)."""
        if not self.cancelled:
            self.cancelled = True
            self.engine._post(Cancel(self))


@dataclass(frozen=True)
class Submit:
    """Inbox message: add `job`'s request to the running batch."""
    job: Job


@dataclass(frozen=True)
class Cancel:
    """Inbox message: stop `job` and free its KV blocks."""
    job: Job


@dataclass(frozen=True)
class Call:
    """Inbox message: `fn(model)` between steps; its result or exception settles
    `future` on `loop`."""
    fn: Callable[[Any], Any]
    future: "asyncio.Future[Any]"
    loop: asyncio.AbstractEventLoop


Message = Union[Submit, Cancel, Call]


class ServingEngine:
    """An `Engine` loaded and driven in a background thread for the HTTP server."""

    def __init__(self, path: str, model_id: str, options: Optional[EngineOptions] = None,
                 max_queue: int = 64,
                 speculative: Optional[Callable[[Engine], Any]] = None,
                 sampling_flags: Optional[Dict[str, Any]] = None,
                 table_sampling: Optional[Dict[str, Any]] = None,
                 log: Optional[ServerLog] = None) -> None:
        """`speculative(engine)`: the SpeculativeConfig every request decodes with (built
        on the engine thread once the model is loaded: a draft model loads there too).
        `sampling_flags` (SamplerConfig field -> value): the operator's sampling defaults,
        over the model's recommendation, over `table_sampling` (what apr's table of
        built-in models recommends); the result is `sampling_defaults`, once loaded."""
        self.path = path
        self.sampling_flags = dict(sampling_flags or {})
        self.table_sampling = dict(table_sampling or {})
        self.sampling_defaults: Optional[SamplingDefaults] = None
        self.log = log or ServerLog()
        self._make_speculative = speculative
        self.speculative: Any = None
        self.model_id = model_id
        self.options = options or EngineOptions()
        self.max_queue = max_queue
        self.engine: Optional[Engine] = None
        self.load_error: Optional[str] = None
        self.created = int(time.time())
        self._inbox: Deque[Message] = deque()
        self._wake = threading.Condition()
        self._ready = threading.Event()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        # submissions posted and not yet in a published snapshot (guarded by _wake)
        self._pending = 0
        self._progress: Deque[Tuple[float, int]] = deque()   # engine thread only
        self._snapshot: Optional[EngineStats] = None         # replaced whole, under _wake
        # submissions waiting for the running ones to finish: they need other LoRA scales
        # than the batch decodes with (engine thread only)
        self._held: List[Message] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="apr-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Fail what is queued or running with 503 and end the engine thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def wait_ready(self, timeout: Optional[float] = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.engine is not None and not self._stopping

    @property
    def model(self) -> Any:
        return None if self.engine is None else self.engine.model

    @property
    def backend(self) -> Optional[str]:
        return None if self.engine is None else self.engine.backend

    @property
    def snapshot(self) -> Optional[EngineStats]:
        """The scheduler's figures as the engine thread last published them (None until
        the model is loaded): an immutable object, safe to read from any thread."""
        return self._snapshot

    def _published(self) -> Tuple[int, Optional[EngineStats]]:
        """(submissions not in the snapshot yet, the snapshot), read together."""
        with self._wake:
            return self._pending, self._snapshot

    @property
    def queue_depth(self) -> int:
        """Requests waiting plus sequences running."""
        pending, snap = self._published()
        return pending if snap is None else pending + snap.waiting + snap.running

    def stats(self) -> Dict[str, float]:
        """Scheduler and block-pool figures (`EngineStats.figures`); {} until ready."""
        pending, snap = self._published()
        if snap is None or not self.ready:
            return {}
        return snap.figures(pending)

    # ------------------------------------------------------------------ requests

    def submit(self, request: GenerationRequest, lora: Any = None) -> Job:
        """Queue `request` (with the LoRA scales `lora`, see lora_select; None: the
        startup scales); 503 while loading (or if loading failed), 429 when full."""
        if not self.ready:
            raise ApiError(503, self.load_error or "model is still loading",
                           code="model_not_ready", headers={"Retry-After": "1"})
        pending, snap = self._published()
        if pending + (snap.waiting if snap is not None else 0) >= self.max_queue:
            raise ApiError(429, "the request queue is full; retry later",
                           code="queue_full", headers={"Retry-After": "1"})
        job = Job(self, request, asyncio.get_running_loop())
        job.lora = lora
        self._post(Submit(job), pending=1)
        return job

    async def run(self, fn: Callable[[Any], Any]) -> Any:
        """`fn(model)` on the engine thread between steps; its result (or exception)."""
        if not self.ready:
            raise ApiError(503, self.load_error or "model is still loading",
                           code="model_not_ready", headers={"Retry-After": "1"})
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._post(Call(fn, future, loop))
        return await future

    def _post(self, message: Message, pending: int = 0) -> None:
        with self._wake:
            self._pending += pending
            self._inbox.append(message)
            self._wake.notify()

    # ------------------------------------------------------------------ engine thread

    def _run(self) -> None:
        try:
            self.engine = load_engine(self.path, self.options)
            self._publish(self.engine.scheduler, 0)  # the block pool, before a request
            if self._make_speculative is not None:
                self.speculative = self._make_speculative(self.engine)
            self.sampling_defaults = resolve(self._recommended(), self.sampling_flags,
                                             self.table_sampling)
            self.log.loaded(self.model_id, self.engine.load_seconds, {
                "backend": self.engine.backend, "max_batch": self.options.max_batch,
                "kv_blocks": self.engine.scheduler.pool.n_blocks,
                "block_tokens": self.options.block_size}, self.sampling_defaults.report())
        except Exception as err:    # whatever it was, /ready must say so, not hang
            self.load_error = "model failed to load: {}".format(err)
            self.log.error(self.load_error)
        self._ready.set()
        if self.engine is None:
            return
        scheduler = self.engine.scheduler
        while True:
            with self._wake:
                while not self._inbox and not self._stopping and not scheduler.has_work() \
                        and not self._held:
                    self._wake.wait(IDLE_WAIT_S)
                messages = list(self._inbox)
                self._inbox.clear()
                stopping = self._stopping
            if self._held and not scheduler.has_work():
                messages = self._held + messages     # other LoRA scales: their turn now
                self._held = []
            kept = _submits(self._held)
            for message in messages:
                self._handle(scheduler, message)
            # the submissions taken leave `_pending` as they enter the snapshot; held ones
            # stay pending (counted in queue_depth) until they go in
            self._publish(scheduler, _submits(messages) - (_submits(self._held) - kept))
            if stopping:
                self._shut_down(scheduler)
                return
            if scheduler.has_work():
                scheduler.step()
                self._note_progress(scheduler.stats["generated_tokens"])
                self._publish(scheduler, 0)

    def _publish(self, scheduler: Any, taken: int) -> None:
        """Replace the snapshot by the scheduler's figures now (engine thread); `taken`
        submissions moved from the inbox into the scheduler since the last one."""
        snapshot = EngineStats.of(scheduler, tuple(self._progress))
        with self._wake:
            self._snapshot = snapshot
            self._pending -= taken

    def _recommended(self) -> Dict[str, Any]:
        """The model's recommended sampling; a side file that cannot be read costs the
        recommendation (said in the log), not the server."""
        try:
            found = read_recommended(self.engine.path)     # the resolved file
        except (AprError, OSError) as err:
            self.log.warning("model sampling recommendation not read: {}".format(err))
            return {}
        if found.ignored:
            self.log.warning("model sampling values out of range, not used: {}".format(
                ", ".join("{}={!r}".format(k, v) for k, v in sorted(found.ignored.items()))))
        return found.values

    def _note_progress(self, generated: int) -> None:
        now = time.perf_counter()
        self._progress.append((now, generated))
        while self._progress and now - self._progress[0][0] > RATE_WINDOW_S:
            self._progress.popleft()

    def _handle(self, scheduler: Any, message: Message) -> None:
        if isinstance(message, Submit):
            job = message.job
            if job.cancelled:
                return
            if not self._lora_ready(scheduler, job):
                self._held.append(message)
                return
            request = job.request
            if request.speculative is None and self.speculative is not None:
                request = replace(request, speculative=self.speculative)
            try:
                job.state = scheduler.submit(request, job.emit)
            except Exception as err:        # a bad request: its own error, nobody else's
                job.emit(ErrorEvent(err))
        elif isinstance(message, Cancel):
            job = message.job
            if job.state is not None and not job.state.done:
                scheduler.cancel(job.state)
        elif isinstance(message, Call):
            try:
                result, error = message.fn(self.engine.model), None
            except Exception as err:        # delivered to the awaiting handler
                result, error = None, err
            message.loop.call_soon_threadsafe(_settle, message.future, result, error)
        else:
            raise TypeError("not an engine message: {!r}".format(message))

    def _lora_ready(self, scheduler: Any, job: Job) -> bool:
        """Whether `job` may join the scheduler now: the adapters' scales are its own (set
        here when nothing runs, or nothing else waits for other scales)."""
        lora = getattr(self.engine.transformer, "lora", None)
        if lora is None:
            return True
        wanted = lora.startup if job.lora is None else tuple(job.lora)
        if tuple(lora.scales) == wanted:
            return not self._held or not scheduler.has_work()
        if scheduler.has_work():
            return False
        lora.set_scales(wanted)
        return True

    def _shut_down(self, scheduler: Any) -> None:
        for message in self._held:
            if isinstance(message, Submit):
                message.job.emit(ErrorEvent(ApiError(503, "server is shutting down")))
        for seq in list(scheduler.running) + list(scheduler.waiting):
            state = seq.state
            if not state.done:
                scheduler.cancel(state)
                state.emit(ErrorEvent(ApiError(503, "server is shutting down")))


def _submits(messages: List[Message]) -> int:
    return sum(isinstance(m, Submit) for m in messages)


def _settle(future: "asyncio.Future[Any]", result: Any, error: Optional[Exception]
            ) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


__all__ = ["ServingEngine", "Job", "Done", "EngineOptions", "EngineStats", "Submit",
           "Cancel", "Call"]
