"""apr_core's kernels on the browser shell's (web/src/simd_kernel.js), registered in
`apr_core.quant.registry` as backend "wasm-simd", so the model code is unchanged.

Pyodide's numpy has neither BLAS nor SIMD (a float32 matvec runs near 1.4 GFLOP/s), and
every numpy call costs tens of microseconds however small its array. So:

* "matmul" / "matmul_group" (`WasmMatmul`): weights of every type in llama.cpp's common
  recipes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K) stay quantized: their GGUF blocks sit
  in the kernels' own WebAssembly memory as stored (placed there by apr_webplace straight from
  the cache, or uploaded once) and are read in place (kernels/matmul_k.c), so a decode step
  streams the file's size, not float32's. Other types (F16, BF16, IQ*) are dequantized once
  to float32 (`matmul_f32.wat`).
* The fused per-layer kinds of apr_core.model.fused (`WasmFused`: residual + RMSNorm,
  RMSNorm alone, RoPE + KV store, decode attention, the SiLU / GELU-tanh gate) run as plain
  loops in the shell (kernels/fused.js), one call each instead of dozens of numpy calls per
  layer.
* Calls pass only integers: x, y and the other arrays stay numpy arrays in Pyodide's memory,
  which the shell reads and writes by address.

Accuracy of the quantized matmuls. The exact kernels (kernels/matmul_k.c, its quantize_x and matmuls):
each 32-column block of x is scaled by dx = max|x| / 32767 and split into two int16 terms,
x ~ dx * (xh + xl / 32768), that meet the weights' integer codes in `i32x4.dot_i16x8_s`. The
integer dots are exact; what remains is the split's residual (< dx * 2^-16, about float32's
own precision) and float32 rounding of the per-block sums. One int16 term alone (as
apr_native's numba kernel does) moves SmolLM2's logits by up to 1.8e-2 (max abs, "The
capital of France is"); with the split the whole browser path (these kernels and the fused
kinds) stays 6.8e-5 from native, like numpy's own kernels in the browser (7.1e-5).
The relaxed-SIMD kernels (matmul_r.c, the default where the browser has relaxed SIMD) round
x per block to one int16 code a column, c = 256 q1 + q2, held as two int8 terms (q1 as
llama.cpp rounds activations, dx = max|x| / 127; q2 its residual in steps of dx / 256),
each meeting the codes in one `i32x4.relaxed_dot_i8x16_i7x16_add_s` per 16 columns (Q8_0:
int16 dots): one int16 term's accuracy (SmolLM2: max logit difference 5.3e-3, next-token
KL 4e-7 where llama.cpp's is 1e-2). q1 alone (llama.cpp's accuracy: max logit
difference ~0.4-1.2) flipped SmolLM2's near-tie first answer token to the demo question
("L'Étoile, ..." for "Paris"), so the page disagreed with `apr run`. Where V8 lowers the
relaxed dot to one VNNI instruction the two terms cost little; on an AVX2-only host (three
instructions a dot) a call costs about the exact kernels' on Q4_1 and ~0.7x on Q8_0.
The page's `kernels=simd-exact` keeps the exact ones.
"""
from __future__ import annotations

import json
import weakref
from typing import Any, Dict, List, Tuple

from apr_core.model.weights import GroupedMatmul
from apr_core.quant.block_kinds import BLOCK_KINDS, KIND_F32

BACKEND = "wasm-simd"
LANES = 16  # the f32 kernel sums 4 x 4 float32 lanes per step: columns a multiple of 16
BLOCK = 32  # the quantized kernels split x in 32-column blocks

GATES = ("silu", "gelu_tanh")  # the gated activations the shell's runGlu computes (fused.js)


# dtype name -> kind code of the shell's quantized kernels (simd_kernel.js, matmul_k.c);
# kind 0 is the float32 kernel. One entry per GGUF block type the kernels read in place.
QUANTIZED: Dict[str, int] = BLOCK_KINDS
# A float32 weight packed in panels for attend_f32.c's register-tiled `gemm` (kernel_jobs.js
# KIND_PANELS): what the speech page's 1500-frame products run on.
KIND_PANELS = 100


try:
    from ctypes import addressof as _addressof, c_char as _c_char
except ImportError:  # a Pyodide built without ctypes
    _c_char = None


def _address(array: Any) -> int:
    """Where a contiguous numpy array's data starts in Pyodide's memory. A decode step asks
    this ~500 times: through the buffer protocol (ctypes) it costs a quarter of numpy's
    `__array_interface__`, which builds a dict and the dtype's descr in Python each time
    (about a tenth of a SmolLM2 decode step in Pyodide's profile); read-only arrays, which
    ctypes refuses, take that way."""
    if _c_char is not None:
        try:
            return _addressof(_c_char.from_buffer(array))
        except (TypeError, ValueError):
            pass
    return array.__array_interface__["data"][0]


class WasmMatmul(GroupedMatmul):
    """A registry "matmul" kernel: `(data, dtype, shape, x, scratch) -> y [T, out]`, and
    "matmul_group" (`group`; both from GroupedMatmul, over `run`).

    Calls pass only integers to JavaScript: `x` and `y` are numpy arrays in Pyodide's memory,
    which the shell reads and writes by address (no conversion of arrays between Python and
    JavaScript objects, which costs more than a decode-sized kernel call in Pyodide 0.17).
    """

    def __init__(self, kernel: Any, quantized: bool = True, panels: bool = False) -> None:
        """`quantized`: blocks read in place where the kernels take their type; else (or for
        other types) a float32 copy, packed in panels with `panels` (KIND_PANELS: many-token
        products), else for matmul_f32.wat (one token at a time)."""
        self._kernel = kernel
        self._quantized = quantized
        self._panels = panels
        self._handles: Dict[int, Tuple[Any, List[int]]] = {}  # id(data) -> (weakref, entry)
        # ids of the weights run together -> (plan id, rows of each, weakrefs to their data)
        self._plans: Dict[Tuple[int, ...], Tuple[int, List[int], List[Any]]] = {}
        self.layers: Dict[int, Tuple[Any, Any]] = {}  # id(block) -> (weakref, layer id | None)

    def forget(self) -> None:
        """Drop every handle and plan (the kernels' memory was reset)."""
        self._handles.clear()
        self._plans.clear()
        self.layers.clear()

    def handles(self, data: Any, dtype: Any, shape: Tuple[int, int]) -> List[int]:
        """`[kind, handle, rows]` of a weight, uploaded on first use."""
        import numpy as np
        from apr_core.quant.api import dequantize
        if getattr(data, "resident", False) and self._quantized:   # placed by apr_webplace
            return [QUANTIZED[dtype.name], int(data.handle), shape[0]]
        entry = self._handles.get(id(data))
        if entry is not None and entry[0]() is data:
            return entry[1]
        kind = QUANTIZED.get(dtype.name, KIND_F32) if self._quantized else KIND_F32
        if kind != KIND_F32 and shape[1] % BLOCK == 0:
            # the GGUF blocks as stored, read in place by the kernel
            blocks = np.ascontiguousarray(data).view(np.uint8)
            handle = self._kernel.uploadBlocks(kind, _address(blocks), blocks.nbytes)
        else:
            kind = KIND_F32
            if getattr(data, "resident", False):   # a float32 copy of placed blocks (checks)
                data = data.all_bytes(dtype.nbytes((shape[1],)))
            weight = np.ascontiguousarray(dequantize(data, dtype, shape), np.float32)  # [out, in]
            if self._panels:
                kind = KIND_PANELS
                handle = self._kernel.uploadPanels(_address(weight), shape[0], shape[1])
            else:
                handle = self._kernel.upload(_address(weight), weight.nbytes)
        self._handles[id(data)] = (weakref.ref(data), [kind, int(handle), shape[0]])
        return self._handles[id(data)][1]

    def usable(self, dtype: Any, shape: Tuple[int, int]) -> bool:
        """Whether a weight runs here (else numpy's kernel takes it)."""
        if self._quantized and dtype.name in QUANTIZED and shape[1] % BLOCK == 0:
            return True
        return self._panels or shape[1] % LANES == 0

    def _plan(self, weights: List[Tuple[Any, Any, Tuple[int, int]]]
              ) -> Tuple[int, List[int], List[Any]]:
        """The shell's plan for running `weights` on one x (registered once per group)."""
        key = tuple([id(data) for data, _, _ in weights])
        entry = self._plans.get(key)
        if entry is not None and all([ref() is data for ref, (data, _, _)
                                      in zip(entry[2], weights)]):
            return entry
        plan = json.dumps([self.handles(*weight) for weight in weights])
        entry = (int(self._kernel.plan(plan)), [shape[0] for _, _, shape in weights],
                 [weakref.ref(data) for data, _, _ in weights])
        self._plans[key] = entry
        return entry

    def run(self, weights: List[Tuple[Any, Any, Tuple[int, int]]], x: Any) -> List[Any]:
        """`x [T, in]` times each `(data, dtype, (out, in))` weight, in one kernel call."""
        import numpy as np
        plan, rows, _ = self._plan(weights)
        x = np.ascontiguousarray(x, np.float32)                          # [T, in]
        tokens = x.shape[0]
        flat = np.empty(tokens * sum(rows), np.float32)                  # [sum(T * out)]
        self._kernel.run(plan, x.shape[1], tokens, _address(x), _address(flat))
        if len(rows) == 1:
            return [flat.reshape(tokens, rows[0])]
        out, start = [], 0
        for count in rows:
            out.append(flat[start:start + tokens * count].reshape(tokens, count))  # [T, out]
            start += tokens * count
        return out


class WasmFused:
    """apr_core's fused per-layer kinds (apr_core/model/fused.py) on the shell's loops
    (kernels/fused.js), which work on the numpy arrays in place by address. Cases they do
    not handle (other gates, biases, odd layouts) go to the numpy references."""

    def __init__(self, kernel: Any, matmul: WasmMatmul) -> None:
        self._kernel = kernel
        self._matmul = matmul
        # the caches the shell's RoPE store and attention read and write in place: float32,
        # and float16 (the f16 KV type, the default) where the browser has Float16Array
        self._cache_dtypes = ("float32", "float16") if getattr(
            kernel, "halfCaches", False) else ("float32",)

    def _in_place(self, k_cache: Any, v_cache: Any) -> bool:
        """Whether the shell works on these caches in place (else the numpy reference)."""
        return (k_cache.flags.c_contiguous and v_cache.flags.c_contiguous
                and k_cache.dtype == v_cache.dtype
                and k_cache.dtype.name in self._cache_dtypes
                and k_cache.shape[-1] == v_cache.shape[-1])

    def rms_norm_add(self, x: Any, a: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
        """`(x + a, rms_norm(x + a) * weight)`, each `[T, d]`."""
        import numpy as np
        x = np.ascontiguousarray(x, np.float32)                          # [T, d]
        weight = np.ascontiguousarray(weight, np.float32)                # [d]
        h = np.empty_like(x)
        s = x if a is None else np.empty_like(x)
        added = 0 if a is None else _address(np.ascontiguousarray(a, np.float32))
        self._kernel.rmsNormAdd(x.shape[0], x.shape[-1], _address(x), added, _address(weight),
                                float(eps), _address(s), _address(h))
        return s, h

    def rms_norm(self, x: Any, weight: Any, eps: float) -> Any:
        """RMSNorm over the last axis, `[..., d] -> [..., d]` (as rows of the kernel above)."""
        import numpy as np
        rows = np.ascontiguousarray(x, np.float32).reshape(-1, x.shape[-1])   # [rows, d]
        return self.rms_norm_add(rows, None, weight, eps)[1].reshape(x.shape)

    def rope_store(self, q: Any, k: Any, v: Any, cos: Any, sin: Any, dim: int, neox: bool,
                   k_cache: Any, v_cache: Any, start: int) -> Any:
        """RoPE on q `[T, H, hd]` and k, k and v into the caches `[n_kv, cap, hd]`."""
        import numpy as np
        from apr_core.model.fused import rope_store
        if not self._in_place(k_cache, v_cache) or k_cache.shape[-1] != q.shape[-1]:
            return rope_store(q, k, v, cos, sin, dim, neox, k_cache, v_cache, start)
        q, k, v = (np.ascontiguousarray(a, np.float32) for a in (q, k, v))
        tables = (0, 0) if cos is None else tuple(
            _address(np.ascontiguousarray(a, np.float32)) for a in (cos, sin))
        out = np.empty_like(q)                                           # [T, H, hd]
        t, heads, hd = q.shape
        self._kernel.ropeStore(t, heads, k.shape[1], hd, _address(q), _address(k), _address(v),
                               tables[0], tables[1], int(dim), bool(neox), _address(k_cache),
                               _address(v_cache), k_cache.shape[1], int(start), _address(out),
                               k_cache.dtype == np.float16)
        return out

    def attention(self, q: Any, k_cache: Any, v_cache: Any, n_keys: int, q_pos: Any,
                  scale: float, window: int) -> Any:
        """Grouped-query attention over the first `n_keys` cached positions -> `[T, H*hd]`."""
        import numpy as np
        from apr_core.model.fused import cached_attention
        if not self._in_place(k_cache, v_cache) or k_cache.shape[-1] != q.shape[-1]:
            return cached_attention(q, k_cache, v_cache, n_keys, q_pos, scale, window)
        q = np.ascontiguousarray(q, np.float32)                          # [T, H, hd]
        positions = np.ascontiguousarray(q_pos, np.int64)                # [T]
        t, heads, hd = q.shape
        out = np.empty((t, heads * hd), np.float32)
        self._kernel.attention(t, heads, k_cache.shape[0], hd, _address(q), _address(k_cache),
                               _address(v_cache), k_cache.shape[1], int(n_keys),
                               _address(positions), float(scale), int(window or 0),
                               _address(out), k_cache.dtype == np.float16)
        return out

    def matmul_glu(self, gate: Any, up: Any, x: Any, act: str) -> Any:
        """`act(x W_gate^T) * (x W_up^T)` -> `[T, d_ff]` in one call (SiLU or GELU-tanh, no
        biases)."""
        import numpy as np
        from apr_core.model.fused import matmul_glu
        usable = self._matmul.usable
        if (act not in GATES or gate.bias is not None or up.bias is not None
                or gate.weight is not None or up.weight is not None
                or gate.data is None or up.data is None          # LoRA-adapted: matmul
                or gate.shape != up.shape or not usable(gate.dtype, gate.shape)
                or not usable(up.dtype, up.shape)):
            return matmul_glu(gate, up, x, act)
        plan = self._matmul._plan([(gate.data, gate.dtype, gate.shape),
                                   (up.data, up.dtype, up.shape)])[0]
        x = np.ascontiguousarray(x, np.float32)                          # [T, d]
        out = np.empty((x.shape[0], gate.shape[0]), np.float32)          # [T, d_ff]
        self._kernel.runGlu(plan, x.shape[1], x.shape[0], _address(x), _address(out), act)
        return out

    def decoder_block(self, model: Any, block: Any, x: Any, positions: Any, cache: Any,
                      tables: Any) -> Any:
        """The whole layer `[T, d] -> [T, d]` in one call (kernels/fused.js decoderLayer)
        where the shell has every part of it (`_layer_plan`), else `model.run_block`."""
        import numpy as np
        from apr_core.model.kv_cache import KVCache
        entry = self._matmul.layers.get(id(block))
        if entry is None or entry[0]() is not block:
            entry = self._matmul.layers[id(block)] = (weakref.ref(block),
                                                      self._layer_plan(model, block))
        layer = entry[1]
        if layer is None or type(cache) is not KVCache or x.ndim != 2:
            return model.run_block(block, x, positions, cache, tables)
        k_cache, v_cache = cache.layer(block.index)
        rope = layer[1]
        cos, sin = tables[rope] if rope is not None else (None, None)   # [T, rot/2] each
        if (not self._in_place(k_cache, v_cache) or k_cache.shape[-1] != model.config.head_dim
                or (cos is not None and (cos.dtype != np.float32 or sin.dtype != np.float32))):
            return model.run_block(block, x, positions, cache, tables)
        x = np.ascontiguousarray(x, np.float32)                          # [T, d]
        out = np.empty_like(x)
        positions = np.ascontiguousarray(positions, np.int64)            # [T]
        if cos is not None:
            cos, sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
        tables_at = (0, 0) if cos is None else (_address(cos), _address(sin))
        self._kernel.layer(layer[0], x.shape[0], _address(x), _address(out), tables_at[0],
                           tables_at[1], _address(k_cache), _address(v_cache), k_cache.shape[1],
                           cache.length, _address(positions), k_cache.dtype == np.float16)
        return out

    def _layer_plan(self, model: Any, block: Any) -> Any:
        """`(layer id, rope kind | None)` of a layer decoderLayer runs as run_block would: pre-
        norm RMSNorms, separate q/k/v, a SiLU / GELU-tanh gate without biases, every weight
        on these kernels; else None (the layer runs kind by kind)."""
        import numpy as np
        cfg, lin, norms = model.config, block.linears, block.norms
        names = ("q", "k", "v", "o", "gate", "up", "down")
        linears = [lin.get(name) for name in names]
        pre = [norms.get("attn_norm"), norms.get("ffn_norm")]
        if (getattr(self._kernel, "layer", None) is None or cfg.act not in GATES
                or lin.get("qkv") is not None or any(l is None for l in linears)
                or block.q_norm is not None or block.k_norm is not None
                or norms.get("post_attn_norm") is not None
                or norms.get("post_ffn_norm") is not None
                or any(n is None or n.kind != "rms" or n.bias is not None for n in pre)):
            return None
        q, k, v, o, gate, up, down = linears
        shapes = [(cfg.q_dim, cfg.d_model), (cfg.kv_dim, cfg.d_model), (cfg.kv_dim, cfg.d_model),
                  (cfg.d_model, cfg.q_dim), up.shape, up.shape, (cfg.d_model, up.shape[0])]
        # data None: no stored blocks to plan (a LoRA AdaptedLinear adds its terms in matmul)
        if (any(l.weight is not None or l.data is None or l.kernels.backend != BACKEND
                or l.shape != shape
                or not self._matmul.usable(l.dtype, l.shape) for l, shape in zip(linears, shapes))
                or gate.bias is not None or up.bias is not None
                or up.shape[1] != cfg.d_model or cfg.n_heads % cfg.n_kv_heads):
            return None
        kind = "sliding" if block.sliding else "full"
        rope = model.ropes.get(kind)
        plan = self._matmul._plan
        held = []   # the float32 copies, alive until the shell has copied them

        def upload(a: Any) -> int:
            if a is None:
                return 0
            held.append(np.ascontiguousarray(a, np.float32))
            return int(self._kernel.upload(_address(held[-1]), held[-1].nbytes))
        layer = {"qkv": plan([(l.data, l.dtype, l.shape) for l in (q, k, v)])[0],
                 "o": plan([(o.data, o.dtype, o.shape)])[0],
                 "glu": plan([(gate.data, gate.dtype, gate.shape), (up.data, up.dtype, up.shape)])[0],
                 "down": plan([(down.data, down.dtype, down.shape)])[0],
                 "d": cfg.d_model, "H": cfg.n_heads, "nKv": cfg.n_kv_heads, "hd": cfg.head_dim,
                 "ff": up.shape[0], "rot": 0 if rope is None else int(rope.dim),
                 "neox": rope is not None and rope.style == "neox", "act": cfg.act,
                 "attnNorm": upload(pre[0].weight), "ffnNorm": upload(pre[1].weight),
                 "eps": [float(pre[0].eps), float(pre[1].eps)],
                 "bias": [upload(l.bias) for l in (q, k, v, o, down)],
                 "scale": float(model.attn_scale),
                 "window": int((cfg.sliding_window if block.sliding else None) or 0)}
        return int(self._kernel.layerPlan(json.dumps(layer))), (None if rope is None else kind)


def register_simd_matmul(quantized: bool = True) -> bool:
    """Register the SIMD kernels as backend "wasm-simd" (when the worker created them) and
    make it the backend of the models this worker loads next (`_state["kernels"]`).
    `quantized=False` keeps every weight as float32 (the earlier kernel, for comparison)."""
    import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals
    kernel = getattr(js, "aprSimd", None)
    if kernel is None:
        return False
    from apr_core import dtypes
    from apr_core.quant import registry
    matmul = WasmMatmul(kernel, quantized)
    for dtype in dtypes.ALL:
        registry.register("matmul", dtype.name, backend=BACKEND)(matmul)
    registry.register("matmul_group", "*", backend=BACKEND)(matmul.group)
    if quantized:  # the float32 mode stays the earlier kernel alone, for comparison
        _register_fused(WasmFused(kernel, matmul))
    from apr_websource import _state
    _state["kernels"] = registry.Kernels(BACKEND)
    _state["placement"] = quantized   # weights placed straight into the kernels' memory
    _state["release_kernels"] = lambda: (kernel.reset(), matmul.forget())
    return True


def _register_fused(fused: WasmFused) -> None:
    """Register the shell's fused kinds where this apr_core has them (apr_core.model.fused)."""
    from apr_core.quant import registry
    try:
        from apr_core.model.fused import KINDS
    except ImportError:  # an apr_core from before the fused kinds
        return
    for kind in KINDS:
        method = getattr(fused, kind, None)
        if method is not None:
            registry.register(kind, "*", backend=BACKEND)(method)


__all__ = ["WasmMatmul", "WasmFused", "register_simd_matmul", "QUANTIZED", "KIND_PANELS", "BACKEND",
           "GATES"]
