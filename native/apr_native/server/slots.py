"""llama-server's slot save / restore / erase (`apr serve --slot-save-path DIR`).

    POST /slots/{id}?action=save     {"filename": "a.bin"}
        -> {"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}}
    POST /slots/{id}?action=restore  {"filename": "a.bin"}
        -> {"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}
    POST /slots/{id}?action=erase
        -> {"id_slot", "n_erased"}

A slot (0 .. max_batch-1, /props' `total_slots`) is the conversation of the last request
that named it with `id_slot` (llama-server's field; a request without it, or with -1, is
slot 0's): its prompt and generated token ids. Their KV lives in the engine's prefix cache
as the scheduler left it; `save` writes the KV of those tokens' cached full blocks as an
APR session file (`apr_core.runtime.kv_session`) in DIR, `restore` gives a file's KV back
to the prefix cache, so the slot's next request (the conversation continued) computes only
its new tokens, as it would have without the save. `erase` forgets the slot's tokens. A
file for another model, KV type or context is refused (400, code "mismatch", E016), a
damaged one too (400, "corrupt" / "checksum"), before anything reaches the cache.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Dict, List, Optional, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime import kv_session
from apr_core.runtime.batching.request import FinishEvent, TokenEvent

from ..hub_store import model_sha256
from .errors import ApiError
from .service import not_ready

ACTIONS = ("save", "restore", "erase")
# a session refused for what it is -> 400; one that is not there -> 404
STATUS = {ErrorCode.IO: 404, ErrorCode.NOT_FOUND: 404}


def valid_filename(name: Any) -> str:
    """`name` if it is one plain file name inside the save folder (llama-server's rule:
    no folder parts, no hidden or relative names), else 400."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 255 \
            or name.startswith(".") or any(c in name for c in "/\\\0:") \
            or any(ord(c) < 32 for c in name):
        raise ApiError(400, "Invalid filename", param="filename", code="invalid_filename")
    return name


class SlotRecorder:
    """A request's Recorder (streaming.py) that also keeps choice 0's token ids and,
    when it finishes, records prompt + generated ids as its slot's conversation."""

    def __init__(self, inner: Any, slots: "Slots", id_slot: int,
                 prompt_ids: Sequence[int]) -> None:
        self.inner = inner
        self.slots = slots
        self.id_slot = id_slot
        self.ids: List[int] = [int(t) for t in prompt_ids]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def token(self, event: TokenEvent) -> Any:
        if event.index == 0:
            self.ids.append(event.token_id)
        return self.inner.token(event)

    def finish(self, event: FinishEvent) -> Any:
        if event.index == 0:
            self.slots.tokens[self.id_slot] = self.ids
        return self.inner.finish(event)


class Slots:
    """The slots of one ServingEngine and the folder their files go to."""

    def __init__(self, serving: Any, directory: str) -> None:
        self.serving = serving
        self.directory = directory
        self.tokens: Dict[int, List[int]] = {}
        self._sha256: Optional[str] = None

    @property
    def count(self) -> int:
        return self.serving.options.max_batch

    def slot_of(self, body: Dict[str, Any]) -> int:
        """The request's `id_slot` (absent or -1: slot 0); 400 outside the slots."""
        value = body.get("id_slot", -1)
        if isinstance(value, bool) or not isinstance(value, int) or \
                not -1 <= value < self.count:
            raise ApiError(400, "id_slot must be -1 or a slot number below {}".format(
                self.count), param="id_slot", code="invalid_slot")
        return max(value, 0)

    def recording(self, recorder: Any, id_slot: int, prompt_ids: Sequence[int]) -> Any:
        return SlotRecorder(recorder, self, id_slot, prompt_ids)

    async def _model_sha256(self) -> str:
        if self._sha256 is None:          # hashed once (and stamped) off the event loop
            self._sha256 = await asyncio.to_thread(model_sha256, self.serving.path)
        return self._sha256

    async def _on_engine(self, fn: Any) -> Any:
        """`fn(engine)` on the engine thread between steps (ServingEngine.run)."""
        serving = self.serving
        return await serving.run(lambda _model: fn(serving.engine))

    # ------------------------------------------------------------------ actions

    async def save(self, id_slot: int, filename: str) -> dict:
        start = time.perf_counter()
        sha = await self._model_sha256()
        tokens = self.tokens.get(id_slot, [])
        state = await self._on_engine(lambda engine: kv_session.capture(
            engine.pool, engine.transformer, tokens, sha, {"id_slot": id_slot}))
        path = os.path.join(self.directory, filename)
        written = await asyncio.to_thread(kv_session.save, path, state)
        return {"id_slot": id_slot, "filename": filename, "n_saved": state.n_tokens,
                "n_written": written,
                "timings": {"save_ms": round((time.perf_counter() - start) * 1000, 3)}}

    async def restore(self, id_slot: int, filename: str) -> dict:
        start = time.perf_counter()
        sha = await self._model_sha256()
        path = os.path.join(self.directory, filename)
        state = await asyncio.to_thread(kv_session.load, path)
        kv_session.check_fits(state, sha, self.serving.engine.transformer)
        restored = await self._on_engine(lambda engine: kv_session.restore(engine.pool,
                                                                            state))
        self.tokens[id_slot] = list(state.tokens)
        return {"id_slot": id_slot, "filename": filename, "n_restored": restored,
                "n_read": os.path.getsize(path),
                "timings": {"restore_ms": round((time.perf_counter() - start) * 1000, 3)}}

    def erase(self, id_slot: int) -> dict:
        return {"id_slot": id_slot, "n_erased": len(self.tokens.pop(id_slot, []))}

    async def handle(self, request: Request, read_body: Any) -> Any:
        """POST /slots/{id_slot}?action=..."""
        raw = request.path_params["id_slot"]
        if not raw.isdigit() or int(raw) >= self.count:
            raise ApiError(400, "Invalid slot id: slots are 0 .. {}".format(self.count - 1),
                           param="id_slot", code="invalid_slot")
        id_slot, action = int(raw), request.query_params.get("action", "")
        if action not in ACTIONS:
            raise ApiError(400, "Invalid action: one of {}".format(", ".join(ACTIONS)),
                           param="action", code="invalid_action")
        if action == "erase":
            return JSONResponse(self.erase(id_slot))
        filename = valid_filename((await read_body(request)).get("filename"))
        if not self.serving.ready:
            raise not_ready(self.serving)
        try:
            if action == "save":
                return JSONResponse(await self.save(id_slot, filename))
            return JSONResponse(await self.restore(id_slot, filename))
        except AprError as err:
            raise ApiError(STATUS.get(err.code, 400 if action == "restore" else 500),
                           "{}: {}".format(err.code.name, err.message), param="filename",
                           code=err.code.category.lower())


def slot_routes(slots: Optional[Slots], read_body: Any, wrap: Any) -> List[Route]:
    """POST /slots/{id_slot}: the actions with a save folder, else 501 as llama-server
    answers without --slot-save-path (whether the model is loaded or not)."""
    async def handler(request: Request) -> Any:
        if slots is None:
            raise ApiError(501, "This server does not support slots action: start it with "
                           "--slot-save-path DIR", code="not_supported")
        return await slots.handle(request, read_body)
    return [Route("/slots/{id_slot}", wrap(handler, needs_model=False), methods=["POST"])]


__all__ = ["Slots", "SlotRecorder", "slot_routes", "valid_filename"]
