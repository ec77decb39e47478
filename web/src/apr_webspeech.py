"""apr in the browser, speech half: a Whisper APR file and transcription (runs in Pyodide,
in web/src/speech_worker.js).

The page decodes audio itself (WebAudio: any format the browser plays, resampled to mono
16 kHz float32) and the worker writes the samples into Pyodide's file system; this module
runs the same `apr_core.speech.transcribe` as `apr run --input` natively on them. Functions
return JSON text, like the rest of the shell's Python side.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict

from apr_websource import _error

_state: Dict[str, Any] = {}


def _plain(value: Any) -> Any:
    """numpy scalars (token ids, probabilities) as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def _simd_matmul() -> Any:
    """`x [..., in] @ w[out, in]^T` on the shell's SIMD float32 kernel (each weight copied
    into the kernels' memory on first use); widths it cannot take go to numpy."""
    import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals
    import numpy as np
    from apr_core import dtypes
    from apr_webkernel import WasmMatmul
    kernel = WasmMatmul(js.aprSimd, quantized=False)
    f32 = dtypes.by_name("F32")

    def matmul(x: Any, w: Any) -> Any:
        if w.ndim != 2 or not kernel.usable(f32, w.shape):
            return x @ w.T
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, x.shape[-1])   # [T, in]
        return kernel.run([(w, f32, w.shape)], rows)[0].reshape(x.shape[:-1] + (w.shape[0],))
    return matmul


def load(path: str, name: str, simd: bool = False) -> str:
    """Load the Whisper APR file at `path` (written by the worker) for `transcribe_file`;
    `simd`: its linear layers on the shell's WebAssembly SIMD kernel."""
    try:
        from apr_core.speech.model import load_whisper
        started = time.perf_counter()
        _state.pop("model", None)    # one model at a time: free the last one first
        model = load_whisper(path)
        kernels = "numpy"
        if simd:
            model.net.matmul = _simd_matmul()
            kernels = "wasm-simd"
        _state["model"], _state["name"] = model, name
        return json.dumps({"name": name, "kernels": kernels,
                           "load_s": time.perf_counter() - started})
    except Exception as exc:
        return _error(exc)


def transcribe_file(path: str, options_json: str) -> str:
    """Transcribe the little-endian float32 mono 16 kHz samples in `path` with `options`
    (`transcribe`'s keyword arguments: language, task, beam_size, initial_prompt ...); the
    result plus `wall_s` (seconds spent in transcribe) and `rtf` (audio seconds per wall
    second)."""
    try:
        import numpy as np
        from apr_core.speech.audio import SAMPLE_RATE
        from apr_core.speech.transcribe import transcribe
        if "model" not in _state:
            return json.dumps({"error": {"code": "model", "message": "load a Whisper model first"}})
        with open(path, "rb") as handle:   # (np.fromfile's seek fails in Pyodide 0.17)
            samples = np.frombuffer(handle.read(), dtype="<f4")   # [n_samples] at 16 kHz
        options = {k: v for k, v in json.loads(options_json).items() if v is not None}
        if isinstance(options.get("temperature"), list):
            options["temperature"] = tuple(options["temperature"])
        started = time.perf_counter()
        result = transcribe(_state["model"], samples, **options)
        wall = time.perf_counter() - started
        result = dict(result, wall_s=wall, audio_s=len(samples) / float(SAMPLE_RATE))
        result["rtf"] = result["audio_s"] / wall if wall > 0 else None
        return json.dumps(result, default=_plain)
    except Exception as exc:
        return _error(exc)
