"""Whisper natively: `load_whisper` on the engine's kernels, plus what makes it fast on a
CPU with a threaded BLAS.

    model = load_native_whisper("whisper-base.apr")                  # best backend
    model = load_native_whisper(path, backend="numba", threads=2)
    result = transcribe(model, samples)

Every native entry point (`apr run --input`, the server's /v1/audio/transcriptions,
bench/whisper.py) loads through here, so all of them run at the same speed. The network
is apr_core's numpy one, unchanged (the browser runs the same code). Its block-quantized
projections (a file from `apr convert --quantize Q8_0 | Q5_0 | ...`), the logits product
over the stored token embedding included, stay at their stored size and run on the
kernels `backends.select` picks, as a text model's do (`apr_core.speech.projections`);
an F16 file's decoder projections and the logits' embedding are read as float16 by
`speech_kernels.HalfLinear` (`half_decoder`; no float32 copy of them), while its encoder
weights (1500-row products: float32 BLAS is their fastest) and F32 files stay float32.
Decoder steps run inside `blas_threads.limited(1)`: their BLAS products (attention, F16
weights) are 1..5 rows, where a second OpenBLAS thread costs 40x more in waiting than it
saves (see blas_threads). The encoder (and each window's cross-attention k|v) runs its
1500 frames in row / output-row pieces (`PIECES_PER_THREAD` a thread) and attention heads,
claimed by whichever of `threads` threads is free, the caller included (`ClaimingMap`),
BLAS on one thread in each: on two loaded cores OpenBLAS's own two threads made a 1500-row
product 1.6x slower than one (they wait on each other's time slices), and a fixed half
each waits for the slower thread; claimed pieces do not.

`speech_kernels` (numba) replaces the numpy passes that were memory-bound: each encoder
head's softmax in one pass over L2-sized row blocks, GELU in one vectorized loop, and the
decoder's cross-attention in one call per layer over K^T / V held as float16 (half the
~36 MB a step read as float32). The cross-attention stays on the calling thread on 2
threads: split over heads through a second pool it was 1.3-3x slower (its thread waits
for the core the numba pool's worker spins on between a step's matvecs).
"""
from __future__ import annotations

import functools
import itertools
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, List, Optional

import numpy as np

from . import blas_threads

DECODER_BLAS_THREADS = 1
# Pieces per thread of the encoder's row / output-row splits: more pieces than threads,
# claimed by whichever thread is free, so a thread the OS deschedules on a loaded machine
# leaves its share to the other instead of holding everyone at the end of the product.
PIECES_PER_THREAD = 4


class ClaimingMap:
    """`map(fn, items)` -> [fn(item)...] in order, on the calling thread and `workers`
    pool threads, each claiming the next unclaimed item: the caller never waits for a
    thread that has not started (its items are taken), only for items being run."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="apr-whisper")

    def __call__(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> List[Any]:
        work = list(items)
        n = len(work)
        if n <= 1:
            return [fn(item) for item in work]
        results: List[Any] = [None] * n
        errors: List[BaseException] = []
        claim = itertools.count()             # next() on it is atomic under the GIL
        finished = [0]
        lock = threading.Lock()
        all_done = threading.Event()

        def run() -> None:
            while True:
                i = next(claim)
                if i >= n:
                    return
                try:
                    results[i] = fn(work[i])
                except BaseException as error:   # noqa: B036 -- re-raised by the caller
                    errors.append(error)
                with lock:
                    finished[0] += 1
                    if finished[0] == n:
                        all_done.set()
        for _ in range(min(self.workers, n - 1)):
            self.pool.submit(run)
        run()
        all_done.wait()
        if errors:
            raise errors[0]
        return results

    def shutdown(self) -> None:
        self.pool.shutdown(False)


# The decoder's projections (their stems): with the token embedding, what a step reads.
DECODER_PROJECTIONS = ("attn.qkv", "attn.out", "cross_attn.query", "mlp.fc1", "mlp.fc2")


def half_decoder(net: Any, map_fn: Optional[Callable], pieces: int) -> List[str]:
    """Each decoder projection (and the tied token embedding) held as a float32 array whose
    values are all float16 (an F16 file's) -> a `speech_kernels.HalfLinear` over those
    float16 values, the float32 copy dropped: the step's products read half the bytes, and
    lose nothing (the float16 values are the stored ones). -> the stems converted."""
    from apr_core.speech.whisper_net import EMBEDDING

    from .speech_kernels import HalfLinear
    done = []
    for name in sorted(net.w):
        stem = name[:-len(".weight")]
        if not (name.endswith(".weight") and stem not in net.linears and
                (stem == EMBEDDING or (stem.startswith("decoder.") and
                                       stem.endswith(DECODER_PROJECTIONS)))):
            continue
        weight = net.w[name]
        if weight.ndim != 2 or weight.dtype != np.float32:
            continue
        half = weight.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), weight):
            continue                            # an F32 file's weight: stays float32
        net.linears[stem] = HalfLinear(stem, half, net.w.get(stem + ".bias"), map_fn, pieces)
        del net.w[name]
        done.append(stem)
    return done


def load_native_whisper(path_or_source: Any, verify: bool = True,
                        backend: Optional[str] = None, threads: Optional[int] = None,
                        fused: bool = True) -> Any:
    """A `WhisperModel` set up for native speed (see the module docstring). `backend`,
    `threads`: as `backends.select` takes them (None: $APR_BACKEND or the fastest, on
    the process's threads). `fused`: the encoder's attention heads, GELU and the decoder's
    cross-attention on `speech_kernels`, the threads claiming pieces (`ClaimingMap`) and an
    F16 file's decoder read as float16 (`half_decoder`); False (or no numba): apr_core's
    numpy with a plain thread pool, as before (for comparisons)."""
    from apr_core.speech.model import load_whisper

    from . import backends
    kernels = backends.select(backend, threads=threads)
    model = load_whisper(path_or_source, verify=verify, kernels=kernels)
    model.kernels = kernels
    net = model.net
    net.decoder_scope = functools.partial(blas_threads.limited, DECODER_BLAS_THREADS)
    net.encoder_scope = functools.partial(blas_threads.limited, 1)
    count = threads or backends.threads()
    net.parts = count
    if fused:
        try:
            from . import speech_kernels
        except ImportError:                     # no numba here: numpy's path
            fused = False
    if fused:
        net.attention_head = speech_kernels.encoder_head
        net.gelu = speech_kernels.gelu
        net.cross_attention = speech_kernels.cross_attention
        net.cross_layout = speech_kernels.half_cross
    if count > 1 and fused:
        claiming = ClaimingMap(count - 1)
        net.map = claiming
        net.parts = count * PIECES_PER_THREAD
        weakref.finalize(model, claiming.shutdown)
    if fused:
        half_decoder(net, net.map if count > 1 else None, net.parts)
    elif count > 1:
        pool = ThreadPoolExecutor(count, thread_name_prefix="apr-whisper")
        net.map = pool.map
        weakref.finalize(model, pool.shutdown, False)
    return model


__all__ = ["load_native_whisper", "half_decoder", "ClaimingMap", "DECODER_BLAS_THREADS",
           "PIECES_PER_THREAD"]
