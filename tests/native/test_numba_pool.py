"""The numba decode pool (apr_native.kernels.pool): chunks claimed by the caller and a
spinning worker give the caller-only result, task after task, whatever state the worker
is in; the pool's threads stop when asked."""
import time

import numpy as np
import pytest

pytestmark = pytest.mark.native
pytest.importorskip("numba")

from apr_core.model.weights import Linear  # noqa: E402
from apr_core import dtypes  # noqa: E402
from apr_core.quant.api import quantize  # noqa: E402
from apr_native.kernels import cpu, pool  # noqa: E402


def linears(rng, specs):
    out = []
    for name, shape in specs:
        dtype = dtypes.BY_NAME[name]
        data = quantize(rng.standard_normal(shape).astype(np.float32), dtype)
        out.append(Linear(name, np.frombuffer(data, np.uint8), dtype, shape))
    return out


@pytest.fixture
def tasks():
    """Groups whose chunk counts differ task to task: a worker late on one task must not
    claim a chunk index of the next (larger) one under the old descriptor."""
    rng = np.random.default_rng(0)
    groups = [linears(rng, [("Q4_1", (64, 256))]),
              linears(rng, [("Q8_0", (300, 256)), ("Q4_K", (40, 256))]),
              linears(rng, [("Q6_K", (7, 256))])]
    xs = [rng.standard_normal((1, 256)).astype(np.float32) for _ in range(4)]
    return groups, xs


def run_all(groups, xs, rounds):
    out = []
    for r in range(rounds):
        for i, group in enumerate(groups):
            out.append(np.concatenate(cpu.numba_matmul_group(group, xs[(r + i) % len(xs)]),
                                      axis=1))
    return out


def test_many_tasks_with_a_worker_equal_caller_only(tasks, monkeypatch):
    groups, xs = tasks
    monkeypatch.setattr(pool, "CHUNK_MIN_BYTES", 1)       # many chunks per task
    pool.restart(1)
    want = run_all(groups, xs, 2)
    workers = pool.restart(2)
    try:
        deadline = time.monotonic() + 20       # on a loaded machine the worker may start late
        rounds = 0
        while rounds < 300 or (workers.chunks_by_workers() == 0 and
                               time.monotonic() < deadline):
            got = run_all(groups, xs, 2)
            for a, b in zip(got, want):
                assert np.array_equal(a, b)
            rounds += 1
        assert workers.chunks_by_workers() > 0      # the worker did take part
    finally:
        pool.restart(1)


def test_a_late_worker_claims_nothing_of_a_finished_task(tasks, monkeypatch):
    """A worker that read the generation of a task and was descheduled before claiming
    resumes after the caller finished that task and began writing the next descriptor
    (more chunks, not yet posted): it must claim nothing. (Found as garbage tokens, one
    process in three, in the batching tests: the claim compared the old index against
    the new descriptor's chunk count.)"""
    groups, xs = tasks
    monkeypatch.setattr(pool, "CHUNK_MIN_BYTES", 1)
    workers = pool.restart(1)                    # the caller alone: nobody else claims
    try:
        ctl, task, fargs = workers.shared
        cpu.numba_matmul_group(groups[0], xs[0])                 # a finished task
        finished = int(ctl[pool.GEN])
        done = int(ctl[pool.DONE])
        task[pool.CHUNKS] += 5                   # the next task's descriptor, half written
        assert pool._work(ctl, task, fargs, finished) == 0
        assert int(ctl[pool.DONE]) == done
    finally:
        pool.restart(1)


def test_a_sleeping_worker_costs_nothing(tasks, monkeypatch):
    """A worker past its spin and patience polls every SLEEP_US: the caller takes the
    chunks it does not, so every task still completes with the same result."""
    groups, xs = tasks
    monkeypatch.setattr(pool, "CHUNK_MIN_BYTES", 1)
    pool.restart(1)
    want = run_all(groups, xs, 1)
    monkeypatch.setattr(pool, "SPIN", 0)
    monkeypatch.setattr(pool, "PATIENCE", 0)
    monkeypatch.setattr(pool, "SLEEP_US", 20000)
    pool.restart(2)
    try:
        for _ in range(20):
            for a, b in zip(run_all(groups, xs, 1), want):
                assert np.array_equal(a, b)
    finally:
        monkeypatch.undo()
        pool.restart(1)


def test_stop_ends_the_worker_threads():
    workers = pool.restart(3)
    threads = list(workers.threads)
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    workers.stop()
    assert not any(t.is_alive() for t in threads)
    pool.restart(1)


def test_chunks_grow_with_the_weights_up_to_a_cap():
    workers = pool.restart(2)
    try:
        assert workers.chunks(1) == 1
        assert workers.chunks(4 * pool.CHUNK_MIN_BYTES) == 4
        assert workers.chunks(1 << 30) == 2 * pool.CHUNKS_PER_THREAD
    finally:
        pool.restart(1)


@pytest.mark.parametrize("name", ["Q4_1", "Q5_0", "Q4_K", "Q6_K"])
def test_results_do_not_depend_on_how_rows_are_split(name):
    """Decode dots and prefill products give the same bits with 1, 2 or 3 threads (8, 16
    or 24 chunks, cut at rows that are not multiples of 4)."""
    rng = np.random.default_rng(5)
    (linear,) = linears(rng, [(name, (103, 512))])
    xs = [rng.standard_normal((t, 512)).astype(np.float32) for t in (1, 3, 9)]
    results = []
    for threads in (1, 2, 3):
        pool.restart(threads)
        results.append([cpu.numba_matmul(linear.data, linear.dtype, linear.shape, x, 0)
                        for x in xs])
    pool.restart(1)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)


def test_weights_in_a_strided_view_are_read_correctly():
    """Tasks address weights by pointer: a weight whose bytes are a strided view (every
    other byte of a buffer) must give the result of the same bytes made contiguous."""
    from apr_native import backends
    rng = np.random.default_rng(9)
    (linear,) = linears(rng, [("Q8_0", (40, 256))])
    spread = np.zeros(2 * linear.data.size, np.uint8)
    spread[::2] = linear.data
    # on numba's kernels: the group falls back to Linear.matmul
    strided = Linear(linear.name, spread[::2], linear.dtype, linear.shape,
                     kernels=backends.select("numba"))
    assert not strided.data.flags.c_contiguous
    for tokens in (1, 7):
        x = rng.standard_normal((tokens, 256)).astype(np.float32)
        want = cpu.numba_matmul(linear.data, linear.dtype, linear.shape, x, 0)
        assert np.array_equal(cpu.numba_matmul(strided.data, strided.dtype, strided.shape,
                                               x, 0), want)
        assert np.array_equal(cpu.numba_matmul_group([strided, strided], x)[1], want)


def test_selecting_numba_starts_the_workers_before_the_first_task():
    """`backends.select("numba")` starts the pool's workers without waiting for them
    (they load their compiled loop while the model loads); the first `get` waits until
    every worker has entered its loop. A fresh process, so no pool exists yet."""
    import subprocess
    import sys
    probe = ("from apr_native import backends\n"
             "from apr_native.kernels import pool\n"
             "assert pool._pool is None\n"
             "backends.select('numba')\n"
             "started = pool._pool\n"
             "assert started is not None and not started._ready\n"
             "got = pool.get()\n"
             "assert got is started and got._ready\n"
             "assert got.ctl[pool.STARTED] == len(got.threads)\n"
             "print(len(got.threads))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=dict(__import__("os").environ, APR_THREADS="2"), timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
