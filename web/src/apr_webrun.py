"""apr in the browser, generation half: load a model URL and run it (see apr_web).

Functions here return JSON text like the rest of the shell's Python side; `apr_web`
re-exports them for the worker.
"""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Dict, List, Optional

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

from apr_websource import _error, _models, _open, _state, drive

BROWSER_KV_BYTES = 256 << 20     # the KV block pool of the engine's scheduler in a tab


def _release_kernel_memory() -> None:
    """Drop the previous model's weights from the kernels' memory (a fresh memory: a
    WebAssembly memory cannot shrink) and the handles that pointed into it."""
    release = _state.get("release_kernels")
    on_gpu = getattr(_state.get("engine"), "backend", None) == "webgpu"
    _state.pop("engine", None)
    _state.pop("model", None)
    _state.pop("source_model", None)
    if release is not None:
        release()
    if on_gpu:
        import apr_webgpu
        apr_webgpu.release()    # the dropped model's GPU buffers now


def _backend(choice: str, host: Any) -> Any:
    """(kernels, why not WebGPU) for `choice` "webgpu" | "cpu" | "auto": WebGPU (its
    forward pass on the GPU worker's device, see apr_webgpu) when a device exists and the
    choice allows it, else `host` (the SIMD or numpy kernels) with the reason."""
    if choice not in ("webgpu", "cpu", "auto"):
        from apr_core.errors import AprError, ErrorCode
        raise AprError(ErrorCode.ARGUMENT, "backend must be webgpu, cpu or auto",
                       backend=choice)
    if choice == "cpu":
        return host, "the CPU backend was chosen"
    import apr_webgpu
    from apr_core.gpu.kernels import WebGPUKernels
    device = apr_webgpu.open_device()
    if device is None:
        return host, apr_webgpu.unavailable()
    return WebGPUKernels(device, host), None


async def load(url: str, dequantize: Optional[bool] = None,
               options: Optional[Dict[str, Any]] = None) -> str:
    """Load a model URL for generation: weights, tokenizer and chat template.

    `options["backend"]`: "auto" (default: WebGPU when the page has a device, else the
    CPU kernels), "webgpu" (the same, the CPU with the reason when there is no device) or
    "cpu". The answer names the `adapter` the model runs on, or `gpu_reason`.
    `options["kvType"]`: the KV cache's storage, f16 (default), q8_0, q4_0 or f32, as
    `--kv-type` natively; the answer has `kv_type` and `kv_bytes_per_token`.

    `dequantize` turns weights into float32 once at load: with numpy's kernels that is the
    fast path (dequantizing every weight on every token costs more than the matvec). With
    the SIMD kernel registered (apr_webkernel) weights stay quantized here, because the
    kernel keeps its own float32 copy. None picks by the active backend. `options`: see
    `_open`.
    """
    options = dict(options or {})
    backend = options.pop("backend", None) or "auto"
    kv_type = options.pop("kvType", None)      # the KV cache's storage, as --kv-type
    lora_specs = options.pop("lora", None)     # [{url, scale}]: see apr_weblora
    try:
        model = await _open(url, options)  # first: download and verification errors come before numpy's
        try:
            from apr_core.runtime.engine import Engine, EngineOptions
            from apr_core.runtime.text_model import TextModel
        except ImportError:
            return json.dumps({"error": {"code": "numpy", "message": "generation needs numpy: "
                                         "use Pyodide 0.17, or an indexURL that serves numpy"}})
        from apr_core.quant import registry
        from apr_core.runtime.context_options import ContextOptions
        context = ContextOptions(kv_type=kv_type)     # E011 on an unknown type: nothing placed
        from apr_weblora import fetch_adapters
        lora = await fetch_adapters(lora_specs or ())   # as --lora FILE:SCALE natively
        kernels = _state.get("kernels") or registry.NUMPY   # apr_webkernel's, if registered
        _release_kernel_memory()   # one model's weights at a time in the kernels' memory
        kernels, gpu_reason = _backend(backend, kernels)
        if dequantize is None:
            dequantize = kernels.backend == registry.REFERENCE
        source_model = model
        from apr_webplace import PlacedModel, place_weights, placeable
        placed: Dict[str, Any] = {}
        on_gpu = kernels.backend == "webgpu"   # the device reads the stored blocks from here
        if _state.get("placement") and not dequantize and not on_gpu and placeable(model):
            placed = await place_weights(model, js.aprSimd)
            source_model = PlacedModel(model, placed)
        else:
            for source in model.remote_sources:
                await source.fill_all()  # one read per file: the loader then never waits
        # THE engine object, over the bytes this worker fetched (its kernels, no mmap here)
        # one sequence at a time in a tab; its KV blocks (speculative decoding runs on the
        # engine's scheduler) within BROWSER_KV_BYTES, allocated on first use
        engine = Engine(await drive(lambda: TextModel.from_model_file(
                            source_model, dequantize_at_load=bool(dequantize), kernels=kernels)),
                        EngineOptions(max_batch=1, kv_memory=BROWSER_KV_BYTES,
                                      context=context, lora=lora), path=url)
        _state["engine"], _state["model"], _state["url"] = engine, engine.model, url
        _state["source_model"] = source_model
        cfg = engine.transformer.config
        gpu_reason = getattr(kernels, "fallback_reason", None) or gpu_reason
        device = engine.transformer.device
        kv = engine.kv_report()
        return json.dumps({"url": url, "arch": cfg.arch, "layers": cfg.n_layers,
                           "kernels": engine.backend,
                           # the WebGPU adapter the model runs on, else why not
                           "adapter": device.device.name if device is not None else None,
                           "gpu_reason": None if device is not None else gpu_reason,
                           "placed_bytes": sum(blocks.nbytes for blocks in placed.values()),
                           "kv_bytes": BROWSER_KV_BYTES,   # the engine's KV budget
                           # keys and values of one position, every layer
                           "kv_type": kv["kv_type"],
                           "kv_bytes_per_token": kv["bytes_per_token"],
                           "vocab": cfg.n_vocab, "context": cfg.max_ctx,
                           "lora": [{"path": p, "scale": s} for p, s in lora],
                           "chat_template": bool(_state["model"].chat_template)})
    except Exception as exc:
        return _error(exc)


def chat(messages_json: str, max_tokens: int = 128, temperature: float = 0.0,
         seed: Optional[int] = None, sampling_json: str = "{}") -> str:
    """Answer a conversation, emitting a `token` event per piece as it is generated.
    `sampling_json`: further sampler options under llama-server's names (`top_k`,
    `dry_multiplier`, `xtc_probability`, `samplers` ...: THE option table), and
    `speculate: "lookup"` (with `draft_max`) for speculative decoding with prompt-lookup
    drafts: the same text, fewer forward passes when the answer repeats its input."""
    import time
    from apr_core.runtime.sampler_options import from_request
    from apr_core.runtime.sampling import SamplerConfig
    try:
        text_model = _state["model"]
        ids = text_model.chat_ids(json.loads(messages_json))
        options = json.loads(sampling_json or "{}")
        session = options.pop("session", None)     # a name: see apr_websession
        speculate = options.pop("speculate", None)
        draft_max = options.pop("draft_max", None), options.pop("draftMax", None)
        draft_max = int(draft_max[0] or draft_max[1] or 8)
        config = SamplerConfig(temperature=float(temperature),
                               seed=None if seed is None else int(seed),
                               **from_request(options, skip=("temperature",)))
        finished: List[Any] = []
        if speculate or session:
            # the engine's scheduler: its prefix cache holds a session's restored rows
            from apr_core.runtime.speculative import SpeculativeConfig
            stream = _state["engine"].stream(
                ids, config, int(max_tokens), report=finished.append,
                speculative=SpeculativeConfig(speculate, draft_max) if speculate else None)
        else:
            stream = text_model.stream(ids, config, max_tokens=int(max_tokens))
        start = time.time()
        first: Optional[float] = None
        pieces, generated = [], []
        for piece in stream:
            first = first or time.time()
            if piece.token_id >= 0:
                generated.append(piece.token_id)
            pieces.append(piece.text)
            js.aprHost.emit("token", json.dumps({"text": piece.text, "id": piece.token_id}))
        end = time.time()
        decode = end - (first or end)
        count = len(generated)
        cached = finished[0].cached_tokens if finished else 0
        saved = None
        if session:
            import apr_websession
            reply = {"role": "assistant", "content": "".join(pieces)}
            saved = apr_websession.save(str(session), ids + generated,
                                        json.loads(messages_json) + [reply])
        return json.dumps({"text": "".join(pieces), "tokens": count, "prompt_tokens": len(ids),
                           # prompt rows served by the prefix cache / computed by this call
                           "cached_tokens": cached, "prefilled_tokens": len(ids) - cached,
                           "session_tokens": saved,
                           "prefill_s": (first or end) - start, "decode_s": decode,
                           "decode_tok_s": (count - 1) / decode if count > 1 and decode else None,
                           "speculative": finished[0].speculative if finished else None})
    except Exception as exc:
        return _error(exc)


def logits(ids_json: str) -> str:
    """Logits `[T, n_vocab]` for a token sequence, as base64 float32 (row-major)."""
    import numpy as np
    try:
        out = _state["model"].transformer.forward(json.loads(ids_json))  # [T, n_vocab]
        return json.dumps({"shape": list(out.shape), "f32": base64.b64encode(
            np.ascontiguousarray(out, dtype="<f4").tobytes()).decode("ascii")})
    except Exception as exc:
        return _error(exc)


def greedy(ids_json: str, count: int) -> str:
    """`count` greedy tokens after the given ids (no stop tokens), with decode timing."""
    import time
    from apr_core.runtime.generate import generate_step
    try:
        steps = generate_step(_state["model"].transformer, json.loads(ids_json),
                              max_tokens=int(count))
        tokens, stamps = [], [time.time()]
        for token in steps:
            tokens.append(int(token))
            stamps.append(time.time())
        decode = stamps[-1] - stamps[1] if len(stamps) > 2 else 0.0
        return json.dumps({"tokens": tokens, "prefill_s": stamps[1] - stamps[0],
                           "decode_tok_s": (len(tokens) - 1) / decode if decode else None})
    except Exception as exc:
        return _error(exc)


def profile_decode(ids_json: str, count: int, top: int = 12) -> str:
    """Where decode time goes: `count` greedy tokens under cProfile, the `top` functions by
    own time as [name, calls, own seconds, cumulative seconds] (bench/browser.py prints it)."""
    import cProfile
    import pstats
    from apr_core.runtime.generate import generate_step
    try:
        profiler = cProfile.Profile()
        profiler.enable()
        list(generate_step(_state["model"].transformer, json.loads(ids_json),
                           max_tokens=int(count)))
        profiler.disable()
        table = pstats.Stats(profiler).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
        rows = sorted(table.items(), key=lambda item: -item[1][2])[:int(top)]
        return json.dumps([["{}:{}({})".format(key[0].rsplit("/", 1)[-1], key[1], key[2]),
                            value[1], value[2], value[3]] for key, value in rows])
    except Exception as exc:
        return _error(exc)


def dequant_digests() -> str:
    """sha256 of every tensor of the loaded model dequantized to little-endian float32 (the
    placed weights read back from the kernels' memory, where the model runs from)."""
    import numpy as np
    from apr_core.quant.api import dequantize
    try:
        model = _state["source_model"]

        def values(name: str) -> Any:
            raw = model.read_raw(name)
            data = raw.data
            if getattr(data, "resident", False):
                data = data.all_bytes(raw.dtype.nbytes((raw.shape[-1],)))
            return dequantize(data, raw.dtype, raw.shape)
        return json.dumps({name: hashlib.sha256(np.ascontiguousarray(
            values(name), dtype="<f4").tobytes()).hexdigest() for name in model.tensors})
    except Exception as exc:
        return _error(exc)


__all__ = ["load", "chat", "logits", "greedy", "profile_decode", "dequant_digests"]
