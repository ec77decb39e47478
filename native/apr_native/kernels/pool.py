"""The numba CPU thread pool: worker threads that wait spinning, and work handed out in
chunks that whichever thread is free takes, the calling thread included.

Why not numba's OpenMP regions, and how workers wait and claim chunks: kernels/README.md.

Tasks: TASK_DOTS, the rows of a table of quantized weights dotted with int16 activations
(`blocks.table_rows`: `block_rows.dot_rows` for one token, `token_rows.dot_token_rows` for
several) or, where `ACT8` is set, int8 ones (`kquant_token_rows` for several, prefill
included); one weight, or several sharing an input, their rows concatenated in `y`;
TASK_GLU, gate and up rows and SiLU(gate) * up over the same row range; TASK_PRODUCTS,
rows dequantized and multiplied with many tokens' float activations (prefill without
`ACT8`, `block_rows.rows_times_tokens`); TASK_ATTENTION, the items of blocked attention.
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

from .. import isa
from .vector import atomics
from .vector.atomics import f32_at, i8_at, i16_at, i64_at
from .blocks.block_table import FIRST_K, KRUN, QBLOCK, quantize_x, quantize_x8
from .attention.paged_attention import run_described
from .blocks.table_rows import (T_ADDRESS, T_BLOCKS, T_KIND, T_ROW_BYTES, T_ROWS,  # noqa: F401
                                TABLE_COLUMNS, table_rows as _table_rows)
from .blocks.token_rows import pair_layout
from .vector.fastexp import silu_mul

# Control words, a cache line (8 int64) apart: waiting threads read GEN and NEXT, so each
# is kept off the lines the others write.
GEN, NEXT, DONE, STOP = 0, 8, 16, 24
BY_WORKERS = 25               # chunks workers have run, all tasks so far (for tests, stats)
STARTED = 26                  # workers that have entered their loop
CTL_WORDS, INDEX_BITS = 32, 32
INDEX_MASK = (1 << INDEX_BITS) - 1

# Task descriptor fields (int64; addresses of the arrays the chunks read and write).
# Every task: its kind, chunks, and the work items (rows, or query heads) they split.
KIND, CHUNKS, WORK = 0, 1, 2
# Weight tasks: weight table, activations `x [T, in]` (quantized: XQ, XD, XS; float32
# for products: X), outputs.
TABLE, WEIGHTS, TOKENS, IN_DIM, XQ, XD, XS, X, Y, Y_COLS, Y_UP, Y_OUT = range(3, 15)
# Attention: the address of its own descriptor (`paged_attention.describe`); the score
# scale is fargs[0].
A_DESC = 15
# Matvecs: activation slots of `token_rows.pair_layout` (0: one token, `quantize_x`'s layout).
SLOTS = 29
ACT8 = 30        # nonzero: matvecs take int8 codes (`quantize_x8`, `_act8_run`)
TASK_WORDS = 32
FARG_WORDS = 4
TASK_DOTS, TASK_GLU, TASK_ATTENTION, TASK_PRODUCTS = 0, 1, 2, 3


# Waiting: SPIN paused reads (~0.1 ms), then PATIENCE reads with a sched_yield between
# (~1 ms on a quiet core), then a poll every SLEEP_US.
SPIN, PATIENCE, SLEEP_US = 4000, 1000, 200
START_TIMEOUT_S = 30.0

# Chunking: at least this many weight bytes per chunk (a claim costs ~0.1 us, a 16 KB
# chunk ~2 us), at most this many chunks per thread (more even out a slow thread).
CHUNK_MIN_BYTES, CHUNKS_PER_THREAD = 16 << 10, 8


@njit(cache=True)
def run_chunk(task, fargs, c):
    """Chunk `c` of the posted task."""
    n, total = task[CHUNKS], task[WORK]
    a, b = c * total // n, (c + 1) * total // n
    if task[KIND] == TASK_ATTENTION:
        run_described(task[A_DESC], fargs[0], a, b)
        return
    tokens, n_in = task[TOKENS], task[IN_DIM]
    table = carray(i64_at(task[TABLE]), (task[WEIGHTS], TABLE_COLUMNS))
    y = carray(f32_at(task[Y]), (tokens, task[Y_COLS]))
    unused = np.empty((0, 0), np.float32)             # for arrays a task kind does not read
    runs, slots = n_in // QBLOCK, task[SLOTS]
    many = task[KIND] == TASK_PRODUCTS
    # one-token activations (`quantize_x`), or several in `token_rows.pair_layout` (SLOTS)
    one = 0 if slots or many else tokens
    xq = carray(i16_at(task[XQ]), (one, n_in))
    xd = carray(f32_at(task[XD]), (one, runs))
    xs = carray(f32_at(task[XS]), (one, runs))
    xp = carray(i16_at(task[XQ]), runs * slots * QBLOCK)
    xdt = carray(f32_at(task[XD]), (runs, slots))
    xst = carray(f32_at(task[XS]), (runs, slots))
    if many:
        x = carray(f32_at(task[X]), (tokens, n_in))
        tile = np.empty((4, n_in), np.float32)                     # [4, in], L1-resident
        _table_rows(table, a, b, xq, xd, xs, xp, xdt, xst, x, tile, y, 2)
        return
    if task[ACT8]:                  # int8 codes (`ACT8`): `kquant_token_rows` for several
        _dots_or_glu(task, table, a, b, carray(i8_at(task[XQ]), (one, n_in)), xd, xs, xp, xdt,
                     xst, unused, y, 0 if one == 1 else 3)
    else:
        _dots_or_glu(task, table, a, b, xq, xd, xs, xp, xdt, xst, unused, y, 1 if slots else 0)


@njit(cache=True)
def _dots_or_glu(task, table, a, b, xq, xd, xs, xp, xdt, xst, unused, y, mode):
    """Rows `a..b-1` of a TASK_DOTS or TASK_GLU task (`_table_rows` mode 0 or 1)."""
    if task[KIND] == TASK_DOTS:
        _table_rows(table, a, b, xq, xd, xs, xp, xdt, xst, unused, unused, y, mode)
    else:                                   # gate rows a..b into y, up rows into y_up
        tokens, total = y.shape[0], task[WORK]
        y_up = carray(f32_at(task[Y_UP]), (tokens, total))
        out = carray(f32_at(task[Y_OUT]), (tokens, total))
        _table_rows(table[0:1], a, b, xq, xd, xs, xp, xdt, xst, unused, unused, y, mode)
        _table_rows(table[1:2], a, b, xq, xd, xs, xp, xdt, xst, unused, unused, y_up, mode)
        silu_mul(y[:, a:b], y_up[:, a:b], out[:, a:b])


@njit(cache=True)
def _work(ctl, task, fargs, g):
    """Claim and run chunks of generation `g` until none is left; how many it ran."""
    ran = 0
    while True:
        v = atomics.load(ctl, NEXT)
        c = v & INDEX_MASK
        if (v >> INDEX_BITS) != g or c >= task[CHUNKS]:
            return ran
        if atomics.compare_swap(ctl, NEXT, v, v + 1):
            run_chunk(task, fargs, c)
            atomics.fetch_add(ctl, DONE, 1)
            ran += 1


@njit(nogil=True, cache=True)
def worker_loop(ctl, task, fargs, spin, patience, sleep_us):
    """A worker thread's life: wait for a new generation, work on it, until STOP."""
    seen = atomics.load(ctl, GEN)
    atomics.fetch_add(ctl, STARTED, 1)
    idle = 0
    while atomics.load(ctl, STOP) == 0:
        g = atomics.load(ctl, GEN)
        if g != seen:
            seen = g
            ran = _work(ctl, task, fargs, g)
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
def _run(ctl, task, fargs):
    """Post the task described in `task` and `fargs`, work on it, wait for the chunks
    workers took."""
    g = atomics.load(ctl, GEN) + 1
    atomics.store(ctl, NEXT, g << INDEX_BITS)        # first: older claims now fail
    atomics.store(ctl, DONE, 0)
    atomics.store(ctl, GEN, g)
    _work(ctl, task, fargs, g)
    waited = 0
    while atomics.load(ctl, DONE) < task[CHUNKS]:
        if waited < SPIN:
            atomics.pause()
        else:
            atomics.sched_yield()
        waited += 1
    # closed: a worker that read GEN = g late must not claim index CHUNKS(g) against the
    # next task's descriptor, which the caller writes before posting it
    atomics.store(ctl, NEXT, (g << INDEX_BITS) | INDEX_MASK)


@njit(cache=True)
def _run_on(ctl, task, fargs, xq, xd, xs):
    """`_run` over activations `xq, xd, xs` (arguments: they live until it is done)."""
    task[XQ], task[XD], task[XS] = xq.ctypes.data, xd.ctypes.data, xs.ctypes.data
    _run(ctl, task, fargs)


@njit(cache=True)
def _act8_run(task):
    """Elements per int8 activation scale: KRUN if a posted weight is a K-quant, else QBLOCK."""
    table = carray(i64_at(task[TABLE]), (task[WEIGHTS], TABLE_COLUMNS))
    for g in range(table.shape[0]):
        if table[g, T_KIND] >= FIRST_K:
            return KRUN
    return QBLOCK


@njit(cache=True)
def _run_matvec(ctl, task, fargs, x):
    """`_run` a matvec over `x [T, in]` quantized (`quantize_x`, or `pair_layout`)."""
    task[TOKENS], task[IN_DIM] = x.shape[0], x.shape[1]
    if task[ACT8]:
        xq8, xd8, xs8 = quantize_x8(x, _act8_run(task))
        task[SLOTS] = 0
        _run_on(ctl, task, fargs, xq8, xd8, xs8)
        return
    xq, xd, xs = quantize_x(x)
    if x.shape[0] > 1:
        xp, xdt, xst = pair_layout(xq, xd, xs)
        task[SLOTS] = xdt.shape[1]
        _run_on(ctl, task, fargs, xp, xdt, xst)
    else:
        task[SLOTS] = 0
        _run_on(ctl, task, fargs, xq, xd, xs)


@njit(cache=True)
def dots(ctl, task, fargs, table, x, y, chunks):
    """`y [T, sum of rows]` = the weights of `table` . `x [T, in]` (int16 activations)."""
    task[KIND], task[TABLE], task[WEIGHTS] = TASK_DOTS, table.ctypes.data, table.shape[0]
    task[Y], task[Y_COLS] = y.ctypes.data, y.shape[1]
    task[CHUNKS], task[WORK] = min(chunks, y.shape[1]), y.shape[1]
    _run_matvec(ctl, task, fargs, x)


@njit(cache=True)
def _one_table(kind, w, rows, nb, row_bytes):
    """The weight table of one weight `w`."""
    table = np.empty((1, TABLE_COLUMNS), np.int64)
    table[0, T_KIND], table[0, T_ADDRESS], table[0, T_ROWS] = kind, w.ctypes.data, rows
    table[0, T_BLOCKS], table[0, T_ROW_BYTES] = nb, row_bytes
    return table


@njit(cache=True)
def dots_one(ctl, task, fargs, kind, w, rows, nb, row_bytes, x, y, chunks):
    """`dots` for one weight `w` (its rows in `y [T, rows]`)."""
    dots(ctl, task, fargs, _one_table(kind, w, rows, nb, row_bytes), x, y, chunks)


@njit(cache=True)
def products(ctl, task, fargs, table, x, y, chunks):
    """`y [T, sum of rows]` = the weights of `table` . `x [T, in]`, float32 products of
    rows dequantized exactly (for many tokens); with `ACT8` set, `dots` of int8 codes."""
    if task[ACT8]:
        dots(ctl, task, fargs, table, x, y, chunks)
        return
    task[KIND], task[TABLE], task[WEIGHTS] = TASK_PRODUCTS, table.ctypes.data, table.shape[0]
    task[Y], task[Y_COLS], task[X] = y.ctypes.data, y.shape[1], x.ctypes.data
    task[TOKENS], task[IN_DIM], task[SLOTS] = x.shape[0], x.shape[1], 0
    task[CHUNKS], task[WORK] = min(chunks, y.shape[1]), y.shape[1]
    _run(ctl, task, fargs)


@njit(cache=True)
def products_one(ctl, task, fargs, kind, w, rows, nb, row_bytes, x, y, chunks):
    """`products` for one weight `w` (its rows in `y [T, rows]`)."""
    products(ctl, task, fargs, _one_table(kind, w, rows, nb, row_bytes), x, y, chunks)


@njit(cache=True)
def glu(ctl, task, fargs, table, x, y_gate, y_up, out, chunks):
    """`out [T, rows]` = SiLU(gate . x) * (up . x), `table` rows 0 and 1 gate and up."""
    rows = out.shape[1]
    task[KIND], task[TABLE], task[WEIGHTS] = TASK_GLU, table.ctypes.data, 2
    task[Y], task[Y_COLS], task[Y_UP], task[Y_OUT] = (y_gate.ctypes.data, rows,
                                                      y_up.ctypes.data, out.ctypes.data)
    task[CHUNKS], task[WORK] = min(chunks, rows), rows
    _run_matvec(ctl, task, fargs, x)


@njit(cache=True)
def attention(ctl, task, fargs, desc, scale, chunks, items, parts, q, k_bytes, v_bytes, out):
    """Run the `items` of blocked attention that `desc` (`paged_attention.describe`)
    describes over the threads, at most `chunks` chunks. The arrays it addresses are
    arguments here, so they live until its last chunk is done."""
    task[KIND], task[A_DESC] = TASK_ATTENTION, desc.ctypes.data
    fargs[0] = scale
    task[CHUNKS], task[WORK] = min(chunks, items.shape[0]), items.shape[0]
    _run(ctl, task, fargs)


class Pool:
    """`workers` spinning threads and the control words and descriptor they share."""

    def __init__(self, workers: int, wait: bool = True) -> None:
        self.ctl = np.zeros(CTL_WORDS, np.int64)
        self.task = np.zeros(TASK_WORDS, np.int64)
        self.task[ACT8] = isa.int8_dots()
        self.fargs = np.zeros(FARG_WORDS, np.float64)
        self.shared = (self.ctl, self.task, self.fargs)     # every task entry's first three
        self.threads: List[threading.Thread] = [threading.Thread(
            target=worker_loop, name="apr-worker-%d" % i, daemon=True,
            args=(self.ctl, self.task, self.fargs, SPIN, PATIENCE, SLEEP_US))
            for i in range(workers)]
        for thread in self.threads:
            thread.start()
        self._ready = False
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Wait for the threads to load their compiled loop (numba's cache, ~0.1-1 s)."""
        if self._ready:
            return
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.ctl[STARTED] < len(self.threads) and time.monotonic() < deadline:
            time.sleep(0.001)
        self._ready = True

    def chunks_by_workers(self) -> int:
        return int(self.ctl[BY_WORKERS])     # chunks workers (not the caller) have run

    def chunks(self, weight_bytes: int) -> int:
        """Chunks for a task over `weight_bytes` of weights."""
        return max(1, min(self.most_chunks(), weight_bytes // CHUNK_MIN_BYTES))

    def row_chunks(self, rows: int) -> int:     # many tokens over `rows` rows (4+ a chunk)
        return max(1, min(self.most_chunks(), rows // 4))

    def most_chunks(self) -> int:
        """Chunks for a task of many similar items (CHUNKS_PER_THREAD per thread)."""
        return CHUNKS_PER_THREAD * (len(self.threads) + 1)

    def stop(self) -> None:
        """End the worker threads (the caller alone runs later tasks)."""
        _signal_stop(self.ctl)
        for thread in self.threads:
            thread.join(timeout=2.0)
        self.threads = []


@njit(cache=True)
def _signal_stop(ctl):
    atomics.store(ctl, STOP, 1)


_pool: Optional[Pool] = None
_lock = threading.Lock()
_bound = threading.local()      # .pool: a pool bound to this thread (an engine's own)


def bind(pool: Optional[Pool]) -> Optional[Pool]:
    """Make `get()` answer `pool` on the calling thread (None: the process's pool again)
    and return the pool bound before: an engine with a thread count of its own
    (`apr_native.numba_kernels`) binds its pool around each kernel call."""
    previous = getattr(_bound, "pool", None)
    _bound.pool = pool
    return previous


def get() -> Pool:
    """The pool bound to this thread (`bind`), else the process's pool, started on first
    use with numba's thread count - 1 workers."""
    global _pool
    mine = getattr(_bound, "pool", None)
    if mine is not None:
        mine.wait_started()
        return mine
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = Pool(max(0, numba.get_num_threads() - 1))
    pool = _pool
    pool.wait_started()
    return pool


def prestart() -> None:
    """Start the workers without waiting: they load their code (LLVM, without the GIL)
    while the caller loads the model; the first task waits for what is left."""
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = Pool(max(0, numba.get_num_threads() - 1), wait=False)


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
