"""Thread counts belong to the engine (issue 41 item 9): two engines in one process on 1
and 2 threads each run numba's kernels on a pool of their own size, never on the
process's pool, one after the other or at the same time, and compute what the process's
pool computes (bit for bit: the rows a thread takes do not change a row's sum)."""
import threading
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

pytest.importorskip("numba")

from apr_core.errors import AprError  # noqa: E402
from apr_native import backends  # noqa: E402
from apr_native.engine import EngineOptions, load_engine  # noqa: E402
from apr_native.kernels import pool  # noqa: E402

PROMPT = "The capital of France is"
TOKENS = 8


@pytest.fixture(scope="module")
def engines(smollm2_gguf):
    shared = load_engine(smollm2_gguf, EngineOptions(backend="numba"))
    one = load_engine(smollm2_gguf, EngineOptions(backend="numba", threads=1))
    two = load_engine(smollm2_gguf, EngineOptions(backend="numba", threads=2))
    return shared, one, two


def test_each_engine_has_its_own_pool(engines):
    shared, one, two = engines
    k1, k2 = one.transformer.kernels, two.transformer.kernels
    assert (k1.threads, k2.threads) == (1, 2)
    assert (len(k1.pool.threads), len(k2.pool.threads)) == (0, 1)   # the caller is the other
    assert k1.pool is not k2.pool
    assert not hasattr(shared.transformer.kernels, "threads")        # the process's pool
    with pytest.raises(AprError):
        backends.select("numba", threads=0)


def test_one_after_the_other_same_logits_and_tokens(engines):
    shared, one, two = engines
    ids = shared.model.prompt_ids(PROMPT)
    process = pool.get()                        # outside any engine: the process's pool
    by_process = process.chunks_by_workers()
    want_logits = shared.session().forward(ids)                      # [n_vocab]
    want = shared.generate(ids, max_tokens=TOKENS).token_ids
    assert len(want) == TOKENS
    by_process = process.chunks_by_workers() - by_process
    k2 = two.transformer.kernels
    deadline = time.monotonic() + 30             # a loaded machine may keep the worker off
    for _ in range(100):
        before = process.chunks_by_workers()
        assert np.array_equal(one.session().forward(ids), want_logits)
        assert np.array_equal(two.session().forward(ids), want_logits)
        assert one.generate(ids, max_tokens=TOKENS).token_ids == want
        assert two.generate(ids, max_tokens=TOKENS).token_ids == want
        assert process.chunks_by_workers() == before      # neither ran on the process's
        if k2.pool.chunks_by_workers() > 0 or time.monotonic() > deadline:
            break
    assert k2.pool.chunks_by_workers() > 0       # the 2-thread engine's worker took part
    assert one.transformer.kernels.pool.chunks_by_workers() == 0    # it has none
    print("process pool: {} chunks by its workers for the shared engine".format(by_process))


def test_at_the_same_time_on_two_threads(engines):
    shared, one, two = engines
    ids = shared.model.prompt_ids(PROMPT)
    want = shared.generate(ids, max_tokens=TOKENS).token_ids
    got, errors = {}, []

    def run(name, engine):
        try:
            got[name] = [engine.generate(ids, max_tokens=TOKENS).token_ids for _ in range(3)]
        except Exception as err:               # reported below, with the thread's name
            errors.append((name, err))
    threads = [threading.Thread(target=run, args=(name, engine))
               for name, engine in (("one", one), ("two", two))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    assert got == {"one": [want] * 3, "two": [want] * 3}
