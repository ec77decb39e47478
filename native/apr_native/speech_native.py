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
F16 / F32 weights are float32 BLAS products (no backend has a block kernel for them).
Decoder steps run inside `blas_threads.limited(1)`: their BLAS products (attention, F16
weights) are 1..5 rows, where a second OpenBLAS thread costs 40x more in waiting than it
saves (see blas_threads). The encoder (and each window's cross-attention k|v) runs its
1500 frames in `threads` row blocks / attention heads on a thread pool of that size, BLAS
on one thread in each: on two loaded cores OpenBLAS's own two threads made a 1500-row
product 1.6x slower than one (they wait on each other's time slices), coarse blocks do not.
"""
from __future__ import annotations

import functools
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from . import blas_threads

DECODER_BLAS_THREADS = 1


def load_native_whisper(path_or_source: Any, verify: bool = True,
                        backend: Optional[str] = None, threads: Optional[int] = None,
                        fused: bool = True) -> Any:
    """A `WhisperModel` set up for native speed (see the module docstring). `backend`,
    `threads`: as `backends.select` takes them (None: $APR_BACKEND or the fastest, on
    the process's threads). `fused`: the encoder's attention heads, GELU and the decoder's
    cross-attention on `speech_kernels` (False: apr_core's numpy, for comparisons)."""
    from apr_core.speech.model import load_whisper

    from . import backends
    kernels = backends.select(backend, threads=threads)
    model = load_whisper(path_or_source, verify=verify, kernels=kernels)
    model.kernels = kernels
    net = model.net
    net.decoder_scope = functools.partial(blas_threads.limited, DECODER_BLAS_THREADS)
    net.encoder_scope = functools.partial(blas_threads.limited, 1)
    net.parts = threads or backends.threads()
    if fused:
        from . import speech_kernels
        net.attention_head = speech_kernels.encoder_head
        net.gelu = speech_kernels.gelu
        net.cross_attention = speech_kernels.cross_attention
    if net.parts > 1:
        pool = ThreadPoolExecutor(net.parts, thread_name_prefix="apr-whisper")
        net.map = pool.map
        weakref.finalize(model, pool.shutdown, False)
    return model


__all__ = ["load_native_whisper", "DECODER_BLAS_THREADS"]
