"""The decode thread pool: worker threads that wait spinning, and work handed out in
chunks that whichever thread is free takes, the calling thread included.

Why not numba's OpenMP regions: decode runs ~120 matvecs per token of 5-50 us each.
Passive OpenMP workers take ~50-100 us to wake, so small matvecs ran serially and two
threads barely beat one; spinning OpenMP workers wait at the region's end for every
thread, so on a busy machine a descheduled worker stalled every matvec (measured: 1 tok/s
with two busy neighbours). Here:

- Workers (jitted `worker_loop`, GIL released, one Python thread each) spin on the
  generation counter for `SPIN` hint-paused reads after their last chunk, then yield the
  core for `PATIENCE` more reads, then poll every `SLEEP_US`: between the matvecs of a
  token they are awake, while idle they cost nothing.
- The caller posts a task (its descriptor holds addresses and sizes), then claims chunks
  itself like any worker. A chunk is claimed by compare-and-swap on one word holding the
  generation and the next chunk index, so a worker still on an older task can never claim
  a chunk of a newer one. The caller waits only for chunks a worker has claimed and not
  finished: a worker that is descheduled or asleep costs nothing, its chunks are taken.

Tasks: TASK_DOTS, the rows of a table of quantized weights dotted with int16 activations
(`cpu_blocks.dot_rows`; one weight, or several sharing an input, their rows concatenated
in `y`) and TASK_GLU, gate and up rows and SiLU(gate) * up over the same row range.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from typing import List, Optional

import numba
import numpy as np
from numba import carray, njit

from . import atomics
from .atomics import f32_at, i16_at, i32_at, i64_at, u8_at
from .common import QBLOCK, quantize_x
from .cpu_blocks import dot_rows

# Control words, a cache line (8 int64) apart: waiting threads read GEN and NEXT, so each
# is kept off the lines the others write.
GEN, NEXT, DONE, STOP = 0, 8, 16, 24
BY_WORKERS = 25               # chunks workers have run, all tasks so far (for tests, stats)
STARTED = 26                  # workers that have entered their loop
CTL_WORDS = 32
INDEX_BITS = 32
INDEX_MASK = (1 << INDEX_BITS) - 1

# Task descriptor fields (int64; addresses of the arrays the chunks read and write).
(KIND, TABLE, WEIGHTS, TOKENS, IN_DIM, XQ, XD, XS, Y, Y_COLS, CHUNKS, WORK_ROWS, Y_UP,
 Y_OUT) = range(14)
TASK_WORDS = 16
TASK_DOTS, TASK_GLU = 0, 1

# Weight table columns (one row per weight): block kind, address, rows, blocks per row,
# bytes per row.
T_KIND, T_ADDRESS, T_ROWS, T_BLOCKS, T_ROW_BYTES = range(5)
TABLE_COLUMNS = 5

# Waiting: SPIN paused reads (~0.1 ms), then PATIENCE reads with a sched_yield between
# (~1 ms on a quiet core), then a poll every SLEEP_US.
SPIN = 4000
PATIENCE = 1000
SLEEP_US = 200
START_TIMEOUT_S = 30.0

# Chunking: at least this many weight bytes per chunk (a claim costs ~0.1 us, a 16 KB
# chunk ~2 us), at most this many chunks per thread (more even out a slow thread).
CHUNK_MIN_BYTES = 16 << 10
CHUNKS_PER_THREAD = 8


@njit(cache=True)
def _row_dots(table, a, b, xq, xd, xs, y, column0):
    """Rows `a..b-1` of the weights of `table` concatenated, into `y[:, column0 + ...]`."""
    first = 0
    for g in range(table.shape[0]):
        rows, row_bytes = table[g, T_ROWS], table[g, T_ROW_BYTES]
        last = first + rows
        lo, hi = max(a, first), min(b, last)
        if lo < hi:
            w = carray(u8_at(table[g, T_ADDRESS]), rows * row_bytes)
            dot_rows(table[g, T_KIND], w, 0, lo - first, hi - first, table[g, T_BLOCKS],
                     row_bytes, xq, xd, xs, y, column0 + lo)
        first = last


@njit(cache=True)
def silu_mul(g, u, out):
    """out = g / (1 + exp(-g)) * u, float32 (the reference's SiLU formula)."""
    for t in range(g.shape[0]):
        for i in range(g.shape[1]):
            x = g[t, i]
            out[t, i] = x / (np.float32(1.0) + np.exp(-x)) * u[t, i]


@njit(cache=True)
def run_chunk(task, c):
    """Chunk `c` of the posted task."""
    tokens, n_in = task[TOKENS], task[IN_DIM]
    xq = carray(i16_at(task[XQ]), (tokens, n_in))
    xd = carray(f32_at(task[XD]), (tokens, n_in // QBLOCK))
    xs = carray(i32_at(task[XS]), (tokens, n_in // QBLOCK))
    table = carray(i64_at(task[TABLE]), (task[WEIGHTS], TABLE_COLUMNS))
    y = carray(f32_at(task[Y]), (tokens, task[Y_COLS]))
    n, total = task[CHUNKS], task[WORK_ROWS]
    a, b = c * total // n, (c + 1) * total // n
    if task[KIND] == TASK_DOTS:
        _row_dots(table, a, b, xq, xd, xs, y, 0)
    else:                                   # gate rows a..b into y, up rows into y_up
        y_up = carray(f32_at(task[Y_UP]), (tokens, total))
        out = carray(f32_at(task[Y_OUT]), (tokens, total))
        _row_dots(table[0:1], a, b, xq, xd, xs, y, 0)
        _row_dots(table[1:2], a, b, xq, xd, xs, y_up, 0)
        silu_mul(y[:, a:b], y_up[:, a:b], out[:, a:b])


@njit(cache=True)
def _work(ctl, task, g):
    """Claim and run chunks of generation `g` until none is left; how many it ran."""
    ran = 0
    while True:
        v = atomics.load(ctl, NEXT)
        c = v & INDEX_MASK
        if (v >> INDEX_BITS) != g or c >= task[CHUNKS]:
            return ran
        if atomics.compare_swap(ctl, NEXT, v, v + 1):
            run_chunk(task, c)
            atomics.fetch_add(ctl, DONE, 1)
            ran += 1


@njit(nogil=True, cache=True)
def worker_loop(ctl, task, spin, patience, sleep_us):
    """A worker thread's life: wait for a new generation, work on it, until STOP."""
    seen = atomics.load(ctl, GEN)
    atomics.fetch_add(ctl, STARTED, 1)
    idle = 0
    while atomics.load(ctl, STOP) == 0:
        g = atomics.load(ctl, GEN)
        if g != seen:
            seen = g
            ran = _work(ctl, task, g)
            if ran:
                atomics.fetch_add(ctl, BY_WORKERS, ran)
            idle = 0
        elif idle < spin:
            atomics.pause()
            idle += 1
        elif idle < spin + patience:
            atomics.sched_yield()
            idle += 1
        else:
            atomics.usleep(sleep_us)


@njit(cache=True)
def _run(ctl, task, xq, xd, xs):
    """Post the task described in `task` with activations `xq, xd, xs` (arguments, so
    they live until the last chunk is done), work on it, wait for the chunks workers
    took."""
    g = atomics.load(ctl, GEN) + 1
    atomics.store(ctl, NEXT, g << INDEX_BITS)        # first: older claims now fail
    atomics.store(ctl, DONE, 0)
    task[XQ], task[XD], task[XS] = xq.ctypes.data, xd.ctypes.data, xs.ctypes.data
    task[TOKENS], task[IN_DIM] = xq.shape[0], xq.shape[1]
    atomics.store(ctl, GEN, g)
    _work(ctl, task, g)
    waited = 0
    while atomics.load(ctl, DONE) < task[CHUNKS]:
        if waited < SPIN:
            atomics.pause()
        else:
            atomics.sched_yield()
        waited += 1


@njit(cache=True)
def dots(ctl, task, table, x, y, chunks):
    """`y [T, sum of rows]` = the weights of `table` . `x [T, in]` (int16 activations)."""
    xq, xd, xs = quantize_x(x)
    task[KIND], task[TABLE], task[WEIGHTS] = TASK_DOTS, table.ctypes.data, table.shape[0]
    task[Y], task[Y_COLS] = y.ctypes.data, y.shape[1]
    task[CHUNKS], task[WORK_ROWS] = min(chunks, y.shape[1]), y.shape[1]
    _run(ctl, task, xq, xd, xs)


@njit(cache=True)
def dots_one(ctl, task, kind, w, rows, nb, row_bytes, x, y, chunks):
    """`dots` for one weight `w` (its rows in `y [T, rows]`)."""
    table = np.empty((1, TABLE_COLUMNS), np.int64)
    table[0, T_KIND], table[0, T_ADDRESS], table[0, T_ROWS] = kind, w.ctypes.data, rows
    table[0, T_BLOCKS], table[0, T_ROW_BYTES] = nb, row_bytes
    dots(ctl, task, table, x, y, chunks)


@njit(cache=True)
def glu(ctl, task, table, x, y_gate, y_up, out, chunks):
    """`out [T, rows]` = SiLU(gate . x) * (up . x), `table` rows 0 and 1 gate and up."""
    xq, xd, xs = quantize_x(x)
    rows = out.shape[1]
    task[KIND], task[TABLE], task[WEIGHTS] = TASK_GLU, table.ctypes.data, 2
    task[Y], task[Y_COLS], task[Y_UP], task[Y_OUT] = (y_gate.ctypes.data, rows,
                                                       y_up.ctypes.data, out.ctypes.data)
    task[CHUNKS], task[WORK_ROWS] = min(chunks, rows), rows
    _run(ctl, task, xq, xd, xs)


class Pool:
    """`workers` spinning threads and the control words and descriptor they share."""

    def __init__(self, workers: int) -> None:
        self.ctl = np.zeros(CTL_WORDS, np.int64)
        self.task = np.zeros(TASK_WORDS, np.int64)
        self.threads: List[threading.Thread] = []
        for i in range(workers):
            thread = threading.Thread(target=worker_loop, name="apr-worker-%d" % i,
                                      args=(self.ctl, self.task, SPIN, PATIENCE, SLEEP_US),
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        # Each thread first loads its compiled loop (from numba's cache), ~0.1-1 s once
        # per process: wait, so the first tasks have their workers.
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.ctl[STARTED] < workers and time.monotonic() < deadline:
            time.sleep(0.001)

    def chunks_by_workers(self) -> int:
        """Chunks the workers (not the caller) have run so far."""
        return int(self.ctl[BY_WORKERS])

    def chunks(self, weight_bytes: int) -> int:
        """Chunks for a task over `weight_bytes` of weights."""
        most = CHUNKS_PER_THREAD * (len(self.threads) + 1)
        return max(1, min(most, weight_bytes // CHUNK_MIN_BYTES))

    def stop(self) -> None:
        atomics_stop(self.ctl)
        for thread in self.threads:
            thread.join(timeout=2.0)
        self.threads = []


@njit(cache=True)
def atomics_stop(ctl):
    atomics.store(ctl, STOP, 1)


_pool: Optional[Pool] = None
_lock = threading.Lock()


def get() -> Pool:
    """The process's pool, started on first use with numba's thread count - 1 workers."""
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = Pool(max(0, numba.get_num_threads() - 1))
    return _pool


def restart(threads: int) -> Pool:
    """Replace the pool by one of `threads` threads in all (the caller included)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.stop()
        _pool = Pool(max(0, threads - 1))
    return _pool


def _shutdown() -> None:
    if _pool is not None:
        _pool.stop()


def _forget_in_child() -> None:
    """A forked child has no worker threads: it starts its own pool when it needs one."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


atexit.register(_shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
