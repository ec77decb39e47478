"""The model registry of a many-model server (`apr serve A B C`, `--models-dir DIR`):
which models exist, which are loaded, and the least-recently-used unloading past
`max_models` (or a memory budget).

    router = ModelRouter({"a.gguf": "/m/a.gguf", ...}, start_model, max_models=2)
    entry = await router.acquire("a.gguf")      # loads on first use, waits while loading
    try: ... entry.app ... finally: router.release(entry)

Every state change happens on the event loop under one asyncio condition; loading and
unloading run in worker threads (the engine loads in its own thread, `wait_ready` and
`stop` are awaited through `asyncio.to_thread`), so a model loading never stalls requests
to models already loaded. A model chosen to make room stops taking new requests
("draining") and unloads once its requests have finished: nothing in flight is cut off,
and a steady stream to a loaded model cannot starve a model waiting for its place.
"""
from __future__ import annotations

import asyncio
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import ApiError
from .model_memory import release_memory

UNLOADED, LOADING, LOADED, UNLOADING, FAILED = \
    "unloaded", "loading", "loaded", "unloading", "failed"

# (model id, reference) -> (its ServingEngine, started: loading in its own thread; its app)
Starter = Callable[[str, str], Tuple[Any, Any]]


@dataclass
class ModelEntry:
    """One model the server knows: its reference and, while loaded, its engine and app."""
    model_id: str
    ref: str
    size: int = 0                   # bytes counted against the memory budget
    state: str = UNLOADED
    engine: Any = None
    app: Any = None
    error: Optional[str] = None
    last_used: float = 0.0
    in_flight: int = 0
    draining: bool = False
    waiting: bool = False           # loading, but waiting for another model to unload
    created: int = 0
    stopping: Any = None            # the engine being stopped (held here, nowhere else)


class ModelRouter:
    """Models by id; `acquire` hands out a loaded one, loading it (and unloading the least
    recently used past the limits) as needed."""

    def __init__(self, refs: Dict[str, str], starter: Starter, max_models: int = 4,
                 memory_budget: int = 0, sizes: Optional[Dict[str, int]] = None,
                 log: Any = None) -> None:
        now = int(time.time())
        self.entries: Dict[str, ModelEntry] = {
            mid: ModelEntry(mid, ref, (sizes or {}).get(mid, 0), created=now)
            for mid, ref in refs.items()}
        self.starter = starter
        self.max_models = max_models
        self.memory_budget = memory_budget
        self.log = log
        self._cond: Optional[asyncio.Condition] = None
        self._tasks: set = set()

    @property
    def cond(self) -> asyncio.Condition:
        if self._cond is None:      # made on the serving loop
            self._cond = asyncio.Condition()
        return self._cond

    def entry(self, model_id: Any) -> ModelEntry:
        found = self.entries.get(model_id) if isinstance(model_id, str) else None
        if found is None:
            raise ApiError(404, "model '{}' not found; this server serves {}".format(
                model_id, ", ".join(sorted(self.entries))), param="model",
                code="model_not_found")
        return found

    # ------------------------------------------------------------------ requests

    async def acquire(self, model_id: str) -> ModelEntry:
        """The loaded model (loaded now if it is not), counted in flight until `release`."""
        entry = self.entry(model_id)
        waited = False
        async with self.cond:
            while True:
                if entry.state == LOADED and not entry.draining:
                    entry.in_flight += 1
                    entry.last_used = time.monotonic()
                    return entry
                if entry.state == FAILED and waited:
                    raise ApiError(503, entry.error or "model failed to load",
                                   code="model_load_failed")
                if entry.state in (UNLOADED, FAILED):
                    self._start_load(entry)
                waited = True
                await self.cond.wait()

    async def release(self, entry: ModelEntry) -> None:
        async with self.cond:
            entry.in_flight -= 1
            entry.last_used = time.monotonic()
            self.cond.notify_all()

    # ------------------------------------------------------------------ load / unload

    async def load(self, model_id: str) -> ModelEntry:
        """POST /models/load: load (if needed) and wait until it is loaded."""
        entry = await self.acquire(model_id)
        await self.release(entry)
        return entry

    async def unload(self, model_id: str) -> bool:
        """POST /models/unload: unload once its requests are done; False if not loaded."""
        entry = self.entry(model_id)
        async with self.cond:
            while entry.state in (LOADING, UNLOADING):
                await self.cond.wait()
            if entry.state != LOADED:
                return False
            entry.draining = True
            while entry.in_flight:
                await self.cond.wait()
            self._detach(entry)
        await self._finish_unload(entry)
        return True

    async def close(self) -> None:
        """Stop every loaded model (server shutdown)."""
        for entry in list(self.entries.values()):
            if entry.state == LOADED:
                self._detach(entry)
                await self._finish_unload(entry)

    def _start_load(self, entry: ModelEntry) -> None:
        entry.state = LOADING
        entry.waiting = True            # until _make_room has made room for it
        entry.error = None
        task = asyncio.get_running_loop().create_task(self._load(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(self, entry: ModelEntry) -> None:
        try:
            await self._make_room(entry)
            engine, app = await asyncio.to_thread(self.starter, entry.model_id, entry.ref)
            await asyncio.to_thread(engine.wait_ready)
            if engine.load_error:
                await asyncio.to_thread(engine.stop)
                raise RuntimeError(engine.load_error)
        except Exception as err:        # the requests waiting for it get a 503 saying so
            async with self.cond:
                entry.waiting = False
                entry.state = FAILED
                entry.error = str(err)
                self.cond.notify_all()
            return
        async with self.cond:
            entry.engine, entry.app = engine, app
            entry.state = LOADED
            entry.last_used = time.monotonic()
            self.cond.notify_all()

    def _over(self, entry: ModelEntry, others: List[ModelEntry]) -> bool:
        if not others:
            return False        # alone it loads, whatever the budget says
        if len(others) + 1 > self.max_models:
            return True
        return bool(self.memory_budget) and \
            sum(o.size for o in others) + entry.size > self.memory_budget

    async def _make_room(self, entry: ModelEntry) -> None:
        """Unload least-recently-used models until `entry` fits (waiting for busy ones)."""
        while True:
            async with self.cond:
                # models holding memory: loaded, unloading, or loading past this point
                # (one still waiting for room holds none, and must not block this one)
                others = [o for o in self.entries.values() if o is not entry and (
                    o.state in (LOADED, UNLOADING) or (o.state == LOADING and not o.waiting))]
                if not self._over(entry, others):
                    entry.waiting = False
                    for other in others:    # a model marked to make room need not go
                        other.draining = False
                    self.cond.notify_all()
                    return
                loaded = sorted((o for o in others if o.state == LOADED),
                                key=lambda o: o.last_used)
                idle = [o for o in loaded if o.in_flight == 0]
                if not idle:
                    if loaded and not any(o.draining for o in loaded):
                        loaded[0].draining = True   # no new requests: it unloads next
                    await self.cond.wait()
                    continue
                victim = idle[0]
                self._detach(victim)
            await self._finish_unload(victim)
            del victim

    def _detach(self, entry: ModelEntry) -> None:
        """Under the condition: the entry leaves the loaded set; its engine is to stop."""
        entry.stopping = entry.engine
        entry.engine = entry.app = None
        entry.state = UNLOADING
        entry.draining = False

    async def _finish_unload(self, entry: ModelEntry) -> None:
        """Stop the detached engine and free its memory (no reference to it survives:
        the weights' mmap closes and the heap is trimmed)."""
        engine, entry.stopping = entry.stopping, None
        await asyncio.to_thread(engine.stop)
        alive = weakref.ref(engine)
        del engine
        await asyncio.to_thread(release_memory)
        if self.log is not None:
            self.log.warning("model '{}' unloaded{}".format(
                entry.model_id, "" if alive() is None else
                " (still referenced: its memory is not freed yet)"))
        async with self.cond:
            entry.state = UNLOADED
            self.cond.notify_all()

    # ------------------------------------------------------------------ listing

    def cards(self) -> List[Dict[str, Any]]:
        """/v1/models' entries with llama-server's router `status` ({"value": ...})."""
        out = []
        for entry in self.entries.values():
            status: Dict[str, Any] = {"value": entry.state}
            if entry.state == LOADING and entry.waiting:
                status["waiting_for_unload"] = True
            if entry.error and entry.state == FAILED:
                status["failed"] = True
                status["error"] = entry.error
            card = {"id": entry.model_id, "object": "model", "created": entry.created,
                    "owned_by": "apr", "path": entry.ref, "status": status}
            if entry.engine is not None and entry.engine.backend:
                card["meta"] = {"backend": entry.engine.backend}
            out.append(card)
        return out


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


__all__ = ["ModelRouter", "ModelEntry", "UNLOADED", "LOADING", "LOADED",
           "UNLOADING", "FAILED"]
