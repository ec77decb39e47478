"""The speech serving object: a Whisper model loaded and run on one worker thread.

    engine = SpeechEngine("whisper-base.apr", "whisper-base.apr")
    engine.start()                                   # loads on the worker thread
    result = await engine.transcribe(samples, language="en")   # the event loop stays free

Transcriptions run one at a time on that thread (a Whisper decode uses every core already,
and the kernels are not re-entrant); requests wait their turn, and past `max_queue` waiting
ones (the running one included) the next is refused with 429. The text models'
`ServingEngine` (continuous batching over a paged KV cache) does not apply to an
encoder-decoder over 30 s windows.
"""
from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, Optional

import numpy as np

from apr_core.errors import AprError

from .errors import ApiError
from .server_log import ServerLog


def is_speech_model(path: str) -> bool:
    """True when `path` is a Whisper APR file (`apr import` of a CTranslate2 directory),
    judged by its metadata alone; a file apr cannot open is left to the text engine to
    report."""
    from apr_core.formats.open import open_model
    from apr_core.speech.model import is_whisper
    if not os.path.isfile(path):
        return False
    try:
        with open_model(path, verify=False) as model:
            return is_whisper(model.metadata)
    except (AprError, OSError):
        return False


class SpeechEngine:
    """A Whisper model served from a single worker thread."""

    def __init__(self, path: str, model_id: str, max_queue: int = 16,
                 log: Optional[ServerLog] = None) -> None:
        self.path = path
        self.log = log or ServerLog()
        self.model_id = model_id
        self.max_queue = max_queue
        self.model: Any = None
        self.load_error: Optional[str] = None
        self.created = int(time.time())
        self.backend = "numpy"
        self._executor: Optional[ThreadPoolExecutor] = None
        self._loading: Optional["Future[Any]"] = None
        self._waiting = 0           # requests holding or waiting for the worker thread
        self._audio_seconds = 0.0
        self._busy_seconds = 0.0
        self._done = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apr-speech")
            self._loading = self._executor.submit(self._load)

    def stop(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def wait_ready(self, timeout: Optional[float] = None) -> bool:
        if self._loading is None:
            return False
        try:
            self._loading.result(timeout)
        except Exception:       # the reason is kept in load_error
            return False
        return self.ready

    def _load(self) -> None:
        try:
            from ..speech_native import load_native_whisper
            self.model = load_native_whisper(self.path)
        except AprError as err:
            self.load_error = "cannot load {}: {}".format(self.model_id, err)
            raise
        except Exception as err:     # reported by /ready instead of killing the server
            self.load_error = "cannot load {}: {}: {}".format(self.model_id,
                                                              type(err).__name__, err)
            raise

    @property
    def ready(self) -> bool:
        return self.model is not None

    @property
    def queue_depth(self) -> int:
        return self._waiting

    def stats(self) -> Dict[str, float]:
        """Figures for /metrics and the model card: transcriptions done, audio seconds
        transcribed and the real-time factor (audio seconds per wall second) so far."""
        return {"transcriptions": self._done, "audio_seconds": self._audio_seconds,
                "real_time_factor": self._audio_seconds / self._busy_seconds
                if self._busy_seconds else 0.0}

    # ------------------------------------------------------------------ requests

    async def transcribe(self, samples: np.ndarray, **options: Any) -> Dict[str, Any]:
        """`apr_core.speech.transcribe.transcribe(model, samples, **options)` on the worker
        thread; 503 until loaded, 429 when `max_queue` requests already wait."""
        if not self.ready or self._executor is None:
            raise ApiError(503, self.load_error or "model is still loading",
                           code="model_not_ready", headers={"Retry-After": "1"})
        if self._waiting >= self.max_queue:
            raise ApiError(429, "the transcription queue is full; retry later",
                           code="queue_full", headers={"Retry-After": "1"})
        self._waiting += 1
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, samples, options)
        finally:
            self._waiting -= 1

    def _run(self, samples: np.ndarray, options: Dict[str, Any]) -> Dict[str, Any]:
        from apr_core.speech.audio import SAMPLE_RATE
        from apr_core.speech.transcribe import transcribe
        started = time.perf_counter()
        result = transcribe(self.model, samples, **options)
        self._busy_seconds += time.perf_counter() - started
        self._audio_seconds += len(samples) / float(SAMPLE_RATE)
        self._done += 1
        return result


__all__ = ["SpeechEngine", "is_speech_model"]
