"""Whisper natively: `load_whisper` plus what makes it fast on a CPU with a threaded BLAS.

    model = load_native_whisper("whisper-base.apr")
    result = transcribe(model, samples)

Every native entry point (`apr run --input`, the server's /v1/audio/transcriptions,
bench/whisper.py) loads through here, so all of them run at the same speed. The network
is apr_core's numpy one, unchanged (the browser runs the same code); only its decoder
steps run inside `blas_threads.limited(1)`: their products are 1..5 rows, where a second
OpenBLAS thread costs 40x more in waiting than it saves (see blas_threads). The encoder's
large products keep every BLAS thread.
"""
from __future__ import annotations

import functools
from typing import Any

from . import blas_threads

DECODER_BLAS_THREADS = 1


def load_native_whisper(path_or_source: Any, verify: bool = True) -> Any:
    """A `WhisperModel` set up for native speed (see the module docstring)."""
    from apr_core.speech.model import load_whisper
    model = load_whisper(path_or_source, verify=verify)
    model.net.decoder_scope = functools.partial(blas_threads.limited, DECODER_BLAS_THREADS)
    return model


__all__ = ["load_native_whisper", "DECODER_BLAS_THREADS"]
