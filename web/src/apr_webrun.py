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


def kernel_check(name: str, x_b64: str, quantized: bool = True) -> str:
    """Run the loaded model's projection `name` on `x` (base64 float32 `[T, in]`) with the
    shell's kernels, for wasm_tests/test_quant_kernel.py: JSON `{"kind", "y"}` with `y`
    base64 float32 `[T, out]`. `quantized=False` runs it through the float32 kernel
    instead (uploading a float32 copy of that one weight)."""
    import base64
    import numpy as np
    from apr_webkernel import WasmMatmul
    transformer = _state["model"].transformer
    linears = [transformer.embedding, transformer.lm_head] + [
        lin for block in transformer.blocks for lin in block.linears.values()]
    lin = [lin for lin in linears if lin is not None and lin.name == name][0]
    kernel = transformer.kernels.lookup("matmul", lin.dtype.name)
    if not quantized:
        kernel = WasmMatmul(js.aprSimd, quantized=False)
    x = np.frombuffer(base64.b64decode(x_b64), "<f4").reshape(-1, lin.shape[1])  # [T, in]
    y = kernel(lin.data, lin.dtype, lin.shape, x, 0)                               # [T, out]
    kind = kernel.handles(lin.data, lin.dtype, lin.shape)[0]
    return json.dumps({"kind": kind, "y": base64.b64encode(
        np.ascontiguousarray(y, "<f4").tobytes()).decode("ascii")})


def fused_check(seed: int) -> str:
    """The shell's fused kinds against apr_core's numpy references on the same random
    decode-step inputs (SmolLM2's shapes: d 576, 9 query / 3 KV heads of 64, a 20-key
    cache), for wasm_tests/test_quant_kernel.py: JSON `{output: [max |diff|, scale]}` with
    scale = max |ref| (max |V| for attention, whose error scales with the values summed)."""
    import numpy as np
    from apr_webkernel import GATES
    from apr_core.model import fused as reference
    kernels = _state["model"].transformer.kernels
    mine = {kind: kernels.fused(kind) for kind in reference.KINDS}
    rng = np.random.RandomState(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    x, a, w = normal(2, 576), normal(2, 576), normal(576)
    q, k, v = normal(2, 9, 64), normal(2, 3, 64), normal(2, 3, 64)
    cos, sin = normal(2, 32), normal(2, 32)
    caches = [normal(3, 32, 64), normal(3, 32, 64)]
    pos = np.array([18, 19])
    block = _state["model"].transformer.blocks[seed % 30].linears
    out: Dict[str, Any] = {}

    def compare(name: str, got: Any, want: Any, scale: Any = None) -> None:
        out[name] = [float(np.abs(got - want).max()),
                     float(np.abs(want if scale is None else scale).max())]

    for added in (a, None):
        (s1, h1), (s2, h2) = (fn(x, added, w, 1e-5) for fn in
                              (mine["rms_norm_add"], reference.rms_norm_add))
        compare("norm_s" if added is not None else "norm_s_none", s1, s2)
        compare("norm_h" if added is not None else "norm_h_none", h1, h2)
    heads = x[:, :x.shape[1] // 64 * 64].reshape(x.shape[0], -1, 64)    # [T, heads, 64]
    compare("norm_heads", mine["rms_norm"](heads, w[:64], 1e-6),
            reference.KINDS["rms_norm"](heads, w[:64], 1e-6))
    # float32 caches, and float16 ones (the f16 KV type: "_f16"), which the shell stores
    # and reads in place where the browser has Float16Array (`half_caches` says whether)
    for storage, suffix in ((np.float32, ""), (np.float16, "_f16")):
        typed = [c.astype(storage) for c in caches]
        for neox in (True, False):
            ours, theirs = [c.copy() for c in typed], [c.copy() for c in typed]
            q1 = mine["rope_store"](q, k, v, cos, sin, 64, neox, ours[0], ours[1], 18)
            q2 = reference.rope_store(q, k, v, cos, sin, 64, neox, theirs[0], theirs[1], 18)
            tag = ("neox" if neox else "gptj") + suffix
            compare("rope_q_" + tag, q1, q2)
            compare("rope_k_" + tag, ours[0].astype(np.float32), theirs[0].astype(np.float32))
            compare("rope_v_" + tag, ours[1].astype(np.float32), theirs[1].astype(np.float32))
        for window in (0, 5):
            compare("attention_w{}{}".format(window, suffix),
                    mine["attention"](q, typed[0], typed[1], 20, pos, 0.125, window),
                    reference.cached_attention(q, typed[0], typed[1], 20, pos, 0.125, window),
                    typed[1][:, :20].astype(np.float32))
    out["half_caches"] = mine["attention"].__self__._cache_dtypes[-1] == "float16"
    for act in GATES:
        compare("glu" if act == "silu" else "glu_" + act,
                mine["matmul_glu"](block["gate"], block["up"], x, act),
                reference.matmul_glu(block["gate"], block["up"], x, act))
    # a whole layer in one call (kind "decoder_block") against the layer kind by kind
    # (run_block), on the model's own weights: outputs and caches, a decode step and a
    # 3-token step after 18 cached positions
    model = _state["model"].transformer
    layer = model.blocks[seed % len(model.blocks)]
    for kv_type in ("f32", "f16"):
        for steps in (1, 3):
            caches = [model.new_cache(32, kv_type) for _ in range(2)]
            for cache in caches:
                for at in (cache.k[layer.index], cache.v[layer.index]):
                    at[:, :18] = np.random.RandomState(seed).standard_normal(
                        at[:, :18].shape).astype(at.dtype)
                cache.length = 18
            positions = caches[0].positions(steps)                       # [T]
            tables = {kind: rope.tables(positions) for kind, rope in model.ropes.items()}
            xs = normal(steps, model.config.d_model)
            got = mine["decoder_block"](model, layer, xs, positions, caches[0], tables)
            want = model.run_block(layer, xs, positions, caches[1], tables)
            tag = "layer_{}_T{}".format(kv_type, steps)
            compare(tag, got, want)
            for name in ("k", "v"):
                compare(tag + "_" + name, getattr(caches[0], name)[layer.index].astype(np.float32),
                        getattr(caches[1], name)[layer.index].astype(np.float32))
    # the layer ran as one shell call (a plan), not run_block's fallback
    out["layer_in_shell"] = mine["decoder_block"].__self__._matmul.layers[id(layer)][1] is not None
    return json.dumps(out)


__all__ = ["load", "chat", "logits", "greedy", "profile_decode", "dequant_digests",
           "kernel_check", "fused_check"]
