/**
 * The shell's versions of apr_core's fused per-layer kernels (apr_core/model/fused.py has the
 * numpy references and the contract): residual + RMSNorm, RoPE + KV store, decode attention,
 * and the SiLU gate. In Pyodide each numpy call costs tens of microseconds whatever its size,
 * and a decoder layer makes dozens; these loops run on the arrays in place, in Python's heap,
 * so a layer costs a handful of calls. Float32 results are rounded as the reference rounds
 * them (Math.fround after each float32 operation) or computed in float64 and rounded once,
 * which is within the reference's own float32 rounding.
 *
 * Every function takes `heap` (an ArrayBuffer: the Python runtime's memory) and byte
 * addresses of C-contiguous arrays in it. KV caches are float32 or float16 (`half`: the
 * f16 KV type, the default): a Float16Array stores a value rounded to nearest, ties to
 * even, as numpy's float32 -> float16 cast does, and reads it back exactly, so an f16
 * cache holds the bytes apr_core's kv_store writes. Where the browser has no Float16Array
 * (HALF_CACHES false) the f16 caches stay with the numpy references.
 */
const f32 = (heap, at, n) => new Float32Array(heap, at, n);
const fr = Math.fround;
export const HALF_CACHES = typeof Float16Array === "function";
/** A KV cache `[n]` as stored: float16 when `half`, else float32. */
const cacheView = (heap, at, n, half) => (half ? new Float16Array(heap, at, n) : f32(heap, at, n));

/** s = x + a (x itself when `a` is 0), h = s * (1 / sqrt(mean(s^2) + eps)) * w; `[T, d]`. */
export function rmsNormAdd(heap, T, d, x, a, w, eps, s, h) {
  rmsNormRows(T, d, f32(heap, x, T * d), a ? f32(heap, a, T * d) : null, f32(heap, w, d), eps,
              f32(heap, s, T * d), f32(heap, h, T * d));
}

/** rmsNormAdd over Float32Arrays (`A` null: no residual; `S` may be `X` itself). */
function rmsNormRows(T, d, X, A, W, eps, S, H) {
  const eps32 = fr(eps);
  for (let t = 0; t < T; t++) {
    const row = t * d;
    let squares = 0;
    for (let i = row; i < row + d; i++) {
      const v = A ? fr(X[i] + A[i]) : X[i];
      if (A) S[i] = v;
      squares += fr(v * v);
    }
    const r = fr(1 / fr(Math.sqrt(fr(fr(squares / d) + eps32))));
    for (let i = 0; i < d; i++) H[row + i] = fr(fr(S[row + i] * r) * W[i]);
  }
}

/** Rotate the first `dim` features of `src [T, heads, hd]` into `dst` (neox: i pairs with
 * i + dim/2, else 2i with 2i + 1) by `cos, sin [T, dim/2]`; features past `dim` are copied.
 * `dst` is indexed as `[heads, cap, hd]` from position `start` when `cache` is set. */
function rotate(SRC, DST, T, heads, hd, C, S, dim, neox, cache, cap, start) {
  const half = dim >> 1;
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < heads; h++) {
      const from = (t * heads + h) * hd;
      const to = cache ? (h * cap + start + t) * hd : from;
      for (let i = 0; i < hd; i++) DST[to + i] = SRC[from + i];
      if (!C) continue;
      for (let i = 0; i < half; i++) {
        const c = C[t * half + i], s = S[t * half + i];
        const ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const a = SRC[from + ia], b = SRC[from + ib];
        DST[to + ia] = fr(fr(a * c) - fr(b * s));
        DST[to + ib] = fr(fr(b * c) + fr(a * s));
      }
    }
  }
}

/** RoPE on q and k, k and v into the caches `[n_kv, cap, hd]` (float16 when `half`) at
 * `start..`, rotated q to `qOut`. `cos` 0: no rotation. */
export function ropeStore(heap, T, H, nKv, hd, q, k, v, cos, sin, dim, neox, kCache, vCache,
                          cap, start, qOut, half = false) {
  const C = cos ? f32(heap, cos, T * (dim >> 1)) : null;
  const S = cos ? f32(heap, sin, T * (dim >> 1)) : null;
  rotate(f32(heap, q, T * H * hd), f32(heap, qOut, T * H * hd), T, H, hd, C, S, dim, neox,
         false, 0, 0);
  const KC = cacheView(heap, kCache, nKv * cap * hd, half);
  rotate(f32(heap, k, T * nKv * hd), KC, T, nKv, hd, C, S, dim, neox, true, cap, start);
  rotate(f32(heap, v, T * nKv * hd), cacheView(heap, vCache, nKv * cap * hd, half), T, nKv,
         hd, null, null, 0, false, true, cap, start);
}

/** Grouped-query attention of `q [T, H, hd]` over cached keys `0..nKeys-1` (caches float16
 * when `half`) -> `out [T, H*hd]`; scores and softmax in float64, probabilities rounded to
 * float32 before the V sum. */
export function attention(heap, T, H, nKv, hd, q, kCache, vCache, cap, nKeys, qPos, scale,
                          window, out, half = false) {
  attend(f32(heap, q, T * H * hd), cacheView(heap, kCache, nKv * cap * hd, half),
         cacheView(heap, vCache, nKv * cap * hd, half), f32(heap, out, T * H * hd),
         new Int32Array(heap, qPos, 2 * T), T, H, nKv, hd, cap, nKeys, scale, window);
}

/** `attention` over views: Q, O `[T, H, hd]`, caches K, V `[nKv, cap, hd]`, and P the int64
 * positions `[T]` as int32 pairs (low words first: little-endian). */
function attend(Q, K, V, O, P, T, H, nKv, hd, cap, nKeys, scale, window) {
  const group = H / nKv;
  const scores = new Float64Array(nKeys);
  const ctx = new Float64Array(hd);
  for (let t = 0; t < T; t++) {
    const pos = P[2 * t];
    for (let h = 0; h < H; h++) {
      const qa = (t * H + h) * hd, kv = Math.floor(h / group) * cap * hd;
      let best = -Infinity;
      for (let j = 0; j < nKeys; j++) {
        if (j > pos || (window && pos - j >= window)) { scores[j] = -Infinity; continue; }
        let dot = 0;
        for (let i = 0, ka = kv + j * hd; i < hd; i++) dot += (Q[qa + i] * scale) * K[ka + i];
        scores[j] = dot;
        if (dot > best) best = dot;
      }
      let total = 0;
      for (let j = 0; j < nKeys; j++) {
        scores[j] = Math.exp(scores[j] - best);
        total += scores[j];
      }
      ctx.fill(0);
      for (let j = 0; j < nKeys; j++) {
        const p = fr(scores[j] / total);
        if (p === 0) continue;
        for (let i = 0, va = kv + j * hd; i < hd; i++) ctx[i] += p * V[va + i];
      }
      for (let i = 0; i < hd; i++) O[qa + i] = ctx[i];
    }
  }
}

/** out = silu(g) * u over `n` float32 values; silu(x) = x / (1 + exp(-x)) in float64. */
export function siluMul(G, U, O, n) {
  for (let i = 0; i < n; i++) {
    const g = G[i];
    O[i] = fr(fr(g / (1 + Math.exp(-g))) * U[i]);
  }
}

const GELU_C = fr(Math.sqrt(2 / Math.PI));
const GELU_K = fr(0.044715);

/** out = gelu_tanh(g) * u over `n` float32 values, step for step as apr_core's float32
 * `gelu_tanh` (layers.py): inner = c (x + k x x x), 0.5 x (1 + tanh(inner)), each product
 * and sum rounded to float32 (tanh in float64, then rounded). */
export function geluTanhMul(G, U, O, n) {
  for (let i = 0; i < n; i++) {
    const x = G[i];
    const inner = fr(GELU_C * fr(x + fr(fr(fr(GELU_K * x) * x) * x)));
    O[i] = fr(fr(fr(0.5 * x) * fr(1 + fr(Math.tanh(inner)))) * U[i]);
  }
}

/** The gated activations `runGlu` takes, by apr_core's name. */
export const GATES = { silu: siluMul, gelu_tanh: geluTanhMul };

/** `Y [T, n]` += bias `B [n]` (float32, as numpy's `y + b`); B null: nothing. */
function addBias(Y, B, T, n) {
  if (!B) return;
  for (let t = 0; t < T; t++) for (let i = 0; i < n; i++) Y[t * n + i] = fr(Y[t * n + i] + B[i]);
}

/**
 * One whole decoder layer (apr_core's `Transformer.run_block` for a pre-norm RMSNorm layer
 * with separate q/k/v, a gated MLP and optional projection biases) in one call: the fused
 * kind "decoder_block" of apr_webkernel. `kernel` is the SimdMatmul whose plans `L` names
 * (`layerPlan`), `x` and `out` `[T, d]` float32, `cos`/`sin` `[T, rot/2]` (0: no RoPE), the
 * caches `[nKv, cap, hd]` (float16 when `half`) and `positions` `[T]` int64 are addresses
 * in the Python heap. Every step is the one its own call would make (the same loops and
 * kernels in the same order), so the layer equals the kind-by-kind layer bit for bit; the
 * intermediates stay in the kernels' memory.
 */
export function decoderLayer(kernel, L, T, x, out, cos, sin, kCache, vCache, cap, start,
                             positions, half) {
  const { d, H, nKv, hd, ff, rot } = L, qd = H * hd, kvd = nKv * hd;
  const area = kernel.layerArea(T, 4 * T * (2 * d + 2 * qd + ff),
                                [[L.qkv, d], [L.o, qd], [L.glu, d], [L.down, ff]]);
  const mem = kernel.memory.buffer, heap = kernel.heap().buffer;
  const view = (at, n) => f32(mem, at, n);
  const X = view(area, T * d), Hn = view(area + 4 * T * d, T * d);
  const Q = view(Hn.byteOffset + 4 * T * d, T * qd), A = view(Q.byteOffset + 4 * T * qd, T * qd);
  const M = view(A.byteOffset + 4 * T * qd, T * ff);
  const bias = (at, n) => (at ? view(at, n) : null);
  X.set(f32(heap, x, T * d));
  rmsNormRows(T, d, X, null, view(L.attnNorm, d), L.eps[0], X, Hn);
  let y = kernel.computeFrom(L.qkv, d, T, Hn);
  const q = view(y, T * qd), k = view(y + 4 * T * qd, T * kvd), v = view(y + 4 * T * (qd + kvd), T * kvd);
  addBias(q, bias(L.bias[0], qd), T, qd);
  addBias(k, bias(L.bias[1], kvd), T, kvd);
  addBias(v, bias(L.bias[2], kvd), T, kvd);
  const C = cos ? f32(heap, cos, T * (rot >> 1)) : null, S = cos ? f32(heap, sin, T * (rot >> 1)) : null;
  const KC = cacheView(heap, kCache, nKv * cap * hd, half), VC = cacheView(heap, vCache, nKv * cap * hd, half);
  rotate(q, Q, T, H, hd, C, S, rot, L.neox, false, 0, 0);
  rotate(k, KC, T, nKv, hd, C, S, rot, L.neox, true, cap, start);
  rotate(v, VC, T, nKv, hd, null, null, 0, false, true, cap, start);
  attend(Q, KC, VC, A, new Int32Array(heap, positions, 2 * T), T, H, nKv, hd, cap, start + T,
         L.scale, L.window);
  y = kernel.computeFrom(L.o, qd, T, A);
  const o = view(y, T * d);
  addBias(o, bias(L.bias[3], d), T, d);
  rmsNormRows(T, d, X, o, view(L.ffnNorm, d), L.eps[1], X, Hn);
  y = kernel.computeFrom(L.glu, d, T, Hn);
  GATES[L.act](view(y, T * ff), view(y + 4 * T * ff, T * ff), M, T * ff);
  y = kernel.computeFrom(L.down, ff, T, M);
  const m = view(y, T * d), O = f32(heap, out, T * d);
  addBias(m, bias(L.bias[4], d), T, d);
  for (let i = 0; i < T * d; i++) O[i] = fr(X[i] + m[i]);
}
