"""server/model_router.py on stand-in engines (the real models: test_server_models.py):
least-recently-used order, the memory budget, a busy model unloaded only once its
requests are done, a failed load answered 503 and retried by the next request."""
import asyncio
import threading

import pytest

pytest.importorskip("starlette", reason="starlette is a native dependency")

from apr_native.server.errors import ApiError  # noqa: E402
from apr_native.server.model_router import ModelRouter  # noqa: E402


class StandIn:
    """What the router uses of a ServingEngine: start/wait_ready/stop/load_error/backend."""

    def __init__(self, model_id, fail=False):
        self.model_id = model_id
        self.load_error = "no such file" if fail else None
        self.backend = "numpy"
        self.stopped = threading.Event()

    def wait_ready(self, timeout=None):
        return True

    def stop(self):
        self.stopped.set()


def router(ids, max_models=4, budget=0, sizes=None, failing=()):
    started = []

    def start(model_id, ref):
        engine = StandIn(model_id, fail=model_id in failing)
        started.append(engine)
        return engine, "app of " + model_id
    made = ModelRouter({i: "/m/" + i for i in ids}, start, max_models=max_models,
                       memory_budget=budget, sizes=sizes)
    return made, started


def loaded(r):
    return sorted(e.model_id for e in r.entries.values() if e.state == "loaded")


def test_least_recently_used_unloads_past_max_models():
    async def go():
        r, started = router("abc", max_models=2)
        for name in "ab":
            await r.release(await r.acquire(name))
        await r.release(await r.acquire("a"))       # b is now the least recently used
        entry = await r.acquire("c")
        assert entry.app == "app of c"
        await r.release(entry)
        assert loaded(r) == ["a", "c"]
        assert [e.model_id for e in started if e.stopped.is_set()] == ["b"]
        assert {c["id"]: c["status"]["value"] for c in r.cards()} == \
            {"a": "loaded", "b": "unloaded", "c": "loaded"}
    asyncio.run(go())


def test_memory_budget_unloads_until_the_new_model_fits():
    async def go():
        r, _ = router("abc", budget=100, sizes={"a": 40, "b": 40, "c": 70})
        for name in "ab":
            await r.release(await r.acquire(name))
        await r.release(await r.acquire("c"))       # 40 + 40 + 70 > 100: a and b go
        assert loaded(r) == ["c"]
    asyncio.run(go())


def test_busy_model_unloads_after_its_request_and_takes_no_new_one():
    async def go():
        r, started = router("ab", max_models=1)
        a = await r.acquire("a")                    # a request to a is running
        b_task = asyncio.ensure_future(r.acquire("b"))
        await asyncio.sleep(0.05)
        assert not b_task.done() and loaded(r) == ["a"]
        assert r.entries["a"].draining
        late_a = asyncio.ensure_future(r.acquire("a"))  # waits: a is making room
        await asyncio.sleep(0.05)
        assert not late_a.done()
        await r.release(a)                          # a's request ends: a unloads, b loads
        b = await b_task
        assert b.model_id == "b" and loaded(r) == ["b"]
        await r.release(b)                          # then a comes back for the late request
        again = await late_a
        assert again.model_id == "a" and loaded(r) == ["a"]
        await r.release(again)
        assert [e.model_id for e in started] == ["a", "b", "a"]
    asyncio.run(go())


def test_failed_load_is_503_and_unknown_model_404():
    async def go():
        r, started = router("ab", failing={"b"})
        with pytest.raises(ApiError) as err:
            await r.acquire("b")
        assert err.value.status == 503 and "no such file" in str(err.value)
        card = next(c for c in r.cards() if c["id"] == "b")
        assert card["status"]["value"] == "failed" and card["status"]["error"]
        with pytest.raises(ApiError):
            await r.acquire("b")                    # the next request tries again
        assert len(started) == 2
        with pytest.raises(ApiError) as err:
            await r.acquire("zzz")
        assert err.value.status == 404 and err.value.code == "model_not_found"
        assert await r.unload("a") is False          # not loaded
    asyncio.run(go())
