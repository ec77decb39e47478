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
_kernels: Dict[str, Any] = {}   # the shell's kernels, registered once (`_shell_kernels`)
WIDENED = "wasm-simd-f32"       # backend: every weight widened once to the float32 kernel


def _plain(value: Any) -> Any:
    """numpy scalars (token ids, probabilities) as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def _simd_matmul(kernel: Any) -> Any:
    """`x [..., in] @ w[out, in]^T` on the shell's SIMD float32 kernel (`kernel`, a
    float32 WasmMatmul: each weight copied into the kernels' memory on first use); widths
    it cannot take go to numpy."""
    import numpy as np
    from apr_core import dtypes
    f32 = dtypes.by_name("F32")

    def matmul(x: Any, w: Any) -> Any:
        if w.ndim != 2 or not kernel.usable(f32, w.shape):
            return x @ w.T
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, x.shape[-1])   # [T, in]
        return kernel.run([(w, f32, w.shape)], rows)[0].reshape(x.shape[:-1] + (w.shape[0],))
    return matmul


def _simd_attention() -> Any:
    """One head of the encoder's attention, `(q [T, dh] scaled, k [S, dh], v [S, dh]) ->
    [T, dh]`, on the shell's kernels (`aprSpeech.attend`, speech_kernels.js: scores, the
    softmax and probs v per 4 query rows in attend_f32.c, the rows shared by the helper
    threads; operands copied into its reused scratch area per call)."""
    import js  # type: ignore[import-not-found]  # the worker's globals: aprSpeech
    import numpy as np
    from apr_webkernel import _address

    def head(q: Any, k: Any, v: Any) -> Any:
        q, k, v = (np.ascontiguousarray(a, np.float32) for a in (q, k, v))
        out = np.empty(q.shape, np.float32)                             # [T, dh]
        js.aprSpeech.attend(_address(q), _address(k), _address(v), q.shape[0], k.shape[0],
                            q.shape[1], _address(out))
        return out
    return head


def _simd_gelu(x: Any) -> Any:
    """Whisper's exact GELU of x (float32, any shape) on the shell's kernel (`aprSpeech.gelu`,
    attend_f32.c, on every thread), on a copy: Pyodide's numpy calls out of WebAssembly for
    each exp."""
    import js  # type: ignore[import-not-found]  # the worker's globals: aprSpeech
    import numpy as np
    from apr_core.speech.whisper_math import gelu
    from apr_webkernel import _address
    if x.size % 4:
        return gelu(x)
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    js.aprSpeech.gelu(_address(out), out.size)
    return out


class _CrossAttention:
    """The decoder's cross-attention (whisper_net's `_cross_attention`: q [B, n, H, dh] over
    K^T [H, dh, S] and V [H, S, dh] -> [B, n, H * dh]) on the shell's kernel
    (`aprSpeech.crossAttend`, attend_f32.c), one call for every head and beam. Each window's
    K^T and V are copied into kernel memory once, the first time a step reads them (a slot,
    kept while those arrays live: a new window's K/V are new arrays)."""

    def __init__(self) -> None:
        self._slots: Dict[int, Any] = {}     # id(K^T) -> (weakref to it, slot)

    def forget(self) -> None:
        """The kernels' memory was reset: every slot is gone."""
        self._slots.clear()

    def _slot(self, keys_t: Any, values: Any) -> int:
        import weakref
        import js  # type: ignore[import-not-found]  # the worker's globals: aprSpeech
        from apr_webkernel import _address
        held = self._slots.get(id(keys_t))
        if held is not None and held[0]() is keys_t:
            return held[1]
        for key, (ref, slot) in list(self._slots.items()):
            if ref() is None:                     # a past window's: its area is free again
                js.aprSpeech.crossFree(slot)
                del self._slots[key]
        heads, dh, frames = keys_t.shape
        slot = int(js.aprSpeech.crossPlace(_address(keys_t), _address(values), heads, dh,
                                           frames))
        self._slots[id(keys_t)] = (weakref.ref(keys_t), slot)
        return slot

    def __call__(self, q: Any, keys_t: Any, values: Any) -> Any:
        import js  # type: ignore[import-not-found]  # the worker's globals: aprSpeech
        import numpy as np
        from apr_webkernel import _address
        if not (keys_t.flags.c_contiguous and values.flags.c_contiguous
                and keys_t.dtype == np.float32 and values.dtype == np.float32):
            keys_t, values = (np.ascontiguousarray(a, np.float32) for a in (keys_t, values))
        b, n, heads, dh = q.shape
        q = np.ascontiguousarray(q, np.float32)                        # [B, n, H, dh]
        out = np.empty((b, n, heads * dh), np.float32)                 # [B, n, H * dh]
        js.aprSpeech.crossAttend(self._slot(keys_t, values), b * n, _address(q),
                                 float(1.0 / np.sqrt(dh)), _address(out))
        return out


class _StftProduct:
    """The log-mel's STFT product (mel.power_spectrogram's `product`: frames [n, N_FFT], a
    strided float32 view of the padded samples, @ the DFT basis [N_FFT, 2 * bins] float64)
    on the shell's kernel (`aprSpeech.stft`, attend_f32.c's gemm_f64 on every thread: the
    sums numpy's own loop makes, in its order), the basis packed into kernel memory once."""

    def __init__(self) -> None:
        self._basis: Any = None                  # (weakref to the basis, its handle)

    def forget(self) -> None:
        """The kernels' memory was reset."""
        self._basis = None

    def __call__(self, frames: Any, basis: Any) -> Any:
        import weakref
        import js  # type: ignore[import-not-found]  # the worker's globals: aprSpeech
        import numpy as np
        from apr_webkernel import _address
        if not (frames.dtype == np.float32 and frames.strides[1] == 4 and frames.strides[0] % 4
                == 0 and basis.dtype == np.float64 and basis.flags.c_contiguous):
            return frames.astype(np.float64) @ basis
        if self._basis is None or self._basis[0]() is not basis:
            handle = js.aprSpeech.stftBasis(_address(basis), basis.shape[0], basis.shape[1])
            self._basis = (weakref.ref(basis), int(handle))
        out = np.empty((frames.shape[0], basis.shape[1]), np.float64)   # [n, 2 * bins]
        js.aprSpeech.stft(self._basis[1], _address(frames), frames.strides[0] // 4,
                          frames.shape[0], basis.shape[0], basis.shape[1], _address(out))
        return out


def _shell_kernels() -> Any:
    """(block kernels, widened kernels, the float32 WasmMatmul) over the shell's kernels,
    registered once and emptied of the last model's weights; None without them.

    The block kernels are the text worker's backend "wasm-simd" (GGUF blocks read in place,
    helper threads over rows). "wasm-simd-f32" widens each weight once into the kernels'
    memory, packed in panels for attend_f32.c's register-tiled product (helper threads over
    frames): the products over a window's 1500 audio frames run there (the block kernels
    re-read every frame's activations for each four rows)."""
    import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals
    import apr_websource
    from apr_core import dtypes
    from apr_core.quant import registry
    from apr_webkernel import WasmMatmul, register_simd_matmul
    shell = apr_websource._state
    if "widened" not in _kernels:
        if not register_simd_matmul(True):
            return None
        widened = WasmMatmul(js.aprSimd, quantized=False, panels=True)
        for dtype in dtypes.ALL:
            registry.register("matmul", dtype.name, backend=WIDENED)(widened)
        registry.register("matmul_group", "*", backend=WIDENED)(widened.group)
        _kernels.update(widened=widened, audio=registry.Kernels(WIDENED),
                        cross=_CrossAttention(), stft=_StftProduct())
    shell["release_kernels"]()      # the last model's weights out of the kernels' memory
    _kernels["widened"].forget()
    _kernels["cross"].forget()
    _kernels["stft"].forget()
    return shell["kernels"], _kernels["audio"], _kernels["widened"]


def _widen_audio(model: Any, widened: Any) -> None:
    """Widen the projections over a window's audio frames (the encoder's, each layer's
    cross-attention k|v) into the kernels' memory now, at load, instead of during the first
    transcription (dequantized in numpy, packed in panels: seconds in Pyodide)."""
    from apr_core.speech.projections import over_audio
    for stem, linear in model.net.linears.items():
        if over_audio(stem):
            widened.handles(linear.data, linear.dtype, linear.shape)


def _load_model(path: str, mode: str) -> Any:
    """The Whisper model at `path` and the name of its kernels, for `mode`: "simd" (every
    projection -- encoder and decoder, cross-attention k|v, the logits over the token
    embedding -- a Linear over the stored bytes on the shell's kernels and helper threads,
    `_shell_kernels`; Python's heap keeps the stored bytes only), "simd-f32" (float32
    weights, each copied to the float32 kernel: the earlier path, for comparison) or
    "numpy"."""
    from apr_core.speech.model import load_whisper
    if mode in ("simd", "simd-f32"):
        shell = _shell_kernels()
        if shell is not None:
            blocks, audio, widened = shell
            if mode == "simd-f32":
                model = load_whisper(path)
                model.net.matmul = _simd_matmul(widened)
                return model, "wasm-simd-f32"
            model = load_whisper(path, kernels=blocks, audio_kernels=audio, plain=True)
            model.net.matmul = _simd_matmul(widened)   # the two convolutions' products
            model.net.attention_head = _simd_attention()   # encoder attention
            model.net.gelu = _simd_gelu
            model.net.cross_attention = _kernels["cross"]
            model.net.stft_product = _kernels["stft"]
            _widen_audio(model, widened)
            return model, "wasm-simd"
    return load_whisper(path), "numpy"


def load(path: str, name: str, simd: Any = False) -> str:
    """Load the Whisper APR file at `path` (written by the worker) for `transcribe_file`;
    `simd`: "simd" (or True), "simd-f32" or "numpy" (or False), as `_load_model` takes
    them."""
    try:
        started = time.perf_counter()
        _state.pop("model", None)    # one model at a time: free the last one first
        mode = "simd" if simd is True else ("numpy" if simd is False else str(simd))
        model, kernels = _load_model(path, mode)
        _state["model"], _state["name"] = model, name
        return json.dumps({"name": name, "kernels": kernels,
                           "load_s": time.perf_counter() - started})
    except Exception as exc:
        return _error(exc)


def _profiler() -> Any:
    """A started cProfile.Profile (`transcribe_file`'s `profile` option)."""
    import cProfile
    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _profile_rows(profiler: Any, top: int) -> Any:
    """The `top` functions of a profile by cumulative time, as [name, calls, own seconds,
    cumulative seconds] (a call into JavaScript counts in its Python caller's own time)."""
    import pstats
    profiler.disable()
    table = pstats.Stats(profiler).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    rows = sorted(table.items(), key=lambda item: -item[1][3])[:top]
    return [["{}:{}({})".format(key[0].rsplit("/", 1)[-1], key[1], key[2]), value[1],
             value[2], value[3]] for key, value in rows]


def transcribe_file(path: str, options_json: str) -> str:
    """Transcribe the little-endian float32 mono 16 kHz samples in `path` with `options`
    (`transcribe`'s keyword arguments: language, task, beam_size, initial_prompt ...; and
    `profile`: N, run under cProfile and add its N costliest functions as `profile`); the
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
        top = int(options.pop("profile", 0) or 0)
        profiler = _profiler() if top else None
        started = time.perf_counter()
        result = transcribe(_state["model"], samples, **options)
        wall = time.perf_counter() - started
        if profiler is not None:
            result = dict(result, profile=_profile_rows(profiler, top))
        result = dict(result, wall_s=wall, audio_s=len(samples) / float(SAMPLE_RATE))
        result["rtf"] = result["audio_s"] / wall if wall > 0 else None
        return json.dumps(result, default=_plain)
    except Exception as exc:
        return _error(exc)
