"""The serving engine's thread (issue 41 item 7): its inbox holds typed messages, what
other threads read about the scheduler is an immutable snapshot the engine thread
publishes, and a call that raises hands back an `Exception`, never a KeyboardInterrupt."""
import asyncio
import dataclasses

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

from apr_core.runtime.batching.request import FinishEvent, GenerationRequest  # noqa: E402
from apr_native.engine import EngineOptions  # noqa: E402
from apr_native.server.engine import (Call, Done, EngineStats, ServingEngine,  # noqa: E402
                                      Submit)

TOKENS = 3


@pytest.fixture(scope="module")
def serving(smollm2_gguf):
    engine = ServingEngine(smollm2_gguf, "smol", EngineOptions(backend="numpy", max_batch=2),
                           max_queue=4)
    engine.start()
    assert engine.wait_ready(120) and engine.ready, engine.load_error
    yield engine
    engine.stop()


async def _generate(engine, ids):
    job = engine.submit(GenerationRequest(ids, max_tokens=TOKENS, ignore_eos=True))
    events = []
    while not isinstance(event := await job.events.get(), Done):
        events.append(event)
    # events are emitted during a step, the snapshot published after it: a call, taken
    # from the inbox after that step, is the barrier
    await engine.run(lambda model: None)
    return events


def test_snapshot_is_published_by_the_engine_thread(serving):
    before = serving.snapshot
    assert isinstance(before, EngineStats)            # published once loaded
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.running = 5
    ids = serving.model.prompt_ids("The capital of France is")
    events = asyncio.run(_generate(serving, ids))
    assert isinstance(events[-1], FinishEvent)
    after = serving.snapshot
    assert after is not before                        # replaced, not changed in place
    assert before.generated_tokens + TOKENS == after.generated_tokens
    assert after.steps > before.steps and after.running == after.waiting == 0
    assert serving.queue_depth == 0
    figures = serving.stats()
    assert figures["generated_tokens"] == after.generated_tokens
    assert figures["kv_blocks_total"] == after.kv_blocks_total > 0
    assert figures["tokens_per_second"] > 0          # generated within the rate window


def test_a_failing_call_delivers_its_exception(serving):
    def boom(model):
        raise ValueError("bad input")

    async def call():
        with pytest.raises(ValueError, match="bad input"):
            await serving.run(boom)
        return await serving.run(lambda model: model.transformer.config.n_layers)
    assert asyncio.run(call()) == serving.model.transformer.config.n_layers


def test_keyboard_interrupt_is_not_swallowed(serving):
    """Only `Exception`s are handed to the caller: an interrupt propagates. Called on a
    fresh, never-started engine's handler (the serving one must keep its thread)."""
    idle = ServingEngine(serving.path, "idle")
    idle.engine = serving.engine

    def interrupt(model):
        raise KeyboardInterrupt

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            idle._handle(None, Call(interrupt, loop.create_future(), loop))
    finally:
        loop.close()


def test_the_inbox_takes_only_messages(serving):
    idle = ServingEngine(serving.path, "idle")
    with pytest.raises(TypeError):
        idle._handle(None, ("call", print, None, None))
    assert {f.name for f in dataclasses.fields(Submit)} == {"job"}
