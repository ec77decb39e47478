/**
 * The shell's WebAssembly SIMD kernels, which apr_core reaches through its kernel registry
 * (apr_webkernel.py registers them as backend "wasm-simd"):
 *  - kernels/matmul_k.c: matmuls straight over GGUF blocks as stored (Q4_0, Q4_1, Q5_0, Q5_1,
 *    Q8_0, Q2_K ... Q6_K), so a weight is held once, at its file size, and the activation
 *    split they read (quantize_x); apr_native builds the same file natively (backend "simd");
 *  - kernels/matmul_r.c: the same matmuls on relaxed SIMD over activations rounded to one
 *    int16 code a column held as two int8 terms (its own quantize_x8: to 2^-16 of a 32-column
 *    block's largest value, where the exact split keeps ~2^-31; llama.cpp's one int8 term
 *    flips SmolLM2's first answer token): used where the browser has relaxed SIMD, unless
 *    the page asks for `exact`;
 *  - kernels/matmul_f32.wat: a float32 matmul for the rest (F16, BF16 ... widened once);
 *  - kernels/attend_f32.c: a register-tiled float32 product over weights packed in panels
 *    (`uploadPanels`: the speech page's 1500-frame products) and the speech page's attention
 *    and GELU (speech_kernels.js), run on every thread by `call`.
 * All of them import one memory created here (shared, with helper threads, where the page is
 * cross-origin isolated). Weights are placed in that memory once (apr_webplace streams a model's blocks there
 * straight from the cache or the network); each call copies `x` in and `y` out of the Python
 * runtime's memory by address. `reset()` drops the memory (a forgotten model's weights).
 */
import * as f32Source from "./kernels/matmul_f32.wasm.js";
import * as blockSource from "./kernels/matmul_k.wasm.js";
import * as relaxedSource from "./kernels/matmul_r.wasm.js";
import * as attendSource from "./kernels/attend_f32.wasm.js";
import { attention, decoderLayer, GATES, HALF_CACHES, rmsNormAdd, ropeStore } from "./kernels/fused.js";
import { CALLS, f32Share, JOB, KIND_PANELS, rowShare } from "./kernel_jobs.js";

const PAGE = 65536;
/** What one wasm32 memory can hold: the kernels' weights and scratch together. */
export const MEMORY_LIMIT = 65536 * PAGE;
/** A shared memory's most pages (what the shared kernel builds declare). */
const SHARED_PAGES = 65535;
/** Where the threads' control block lives: page 0, above the C kernels' 16 KiB stack. */
const CONTROL = PAGE - 4096;
const align = (n) => (n + 15) & ~15;
/** Two cache lines (the unit the hardware prefetches in pairs), and `n` rounded up to them. */
const LINES = 128;
const lines = (n) => (n + LINES - 1) & ~(LINES - 1);
const decode = (base64) => Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
/** Kind codes of apr_webkernel.QUANTIZED (0: float32); 5 is Q2_K, whose mins need sums16. */
const KIND_F32 = 0;
const KIND_Q2_K = 5;
/** Weight rows per panel of attend_f32.c's product (panel_gemm.h). */
export const PANEL = 8;

export class SimdMatmul {
  /**
   * Compile the kernels; rejects where WebAssembly SIMD is unavailable.
   * `heap()` returns a Uint8Array over the Python runtime's memory (re-read on every call:
   * it is replaced when that memory grows); weights, `x` and `y` are passed by address in it.
   * `exact`: keep the exact kernels even where relaxed SIMD is there.
   */
  static async create(heap, { threads = 1, exact = false } = {}) {
    const isolated = typeof SharedArrayBuffer !== "undefined" && globalThis.crossOriginIsolated === true;
    const count = isolated ? Math.max(1, Math.floor(threads) || 1) : 1;
    const key = count > 1 ? "wasmSharedBase64" : "wasmBase64";
    const relaxed = exact ? null : decode(relaxedSource[key]);
    const sources = [f32Source, blockSource, attendSource].map((source) => decode(source[key]));
    if (relaxed && WebAssembly.validate(relaxed)) sources.push(relaxed);
    const modules = await Promise.all(sources.map((bytes) => WebAssembly.compile(bytes)));
    return new SimdMatmul(modules, heap, count, isolated);
  }

  /** `threads` > 1 only where the page is cross-origin isolated (`isolated`): matmul rows
   * are then split over `threads - 1` helper Workers and this one, over a shared memory. */
  constructor(modules, heap, threads = 1, isolated = false) {
    this.modules = modules;
    this.heap = heap;
    this.threads = threads;
    this.isolated = isolated;
    this.helpers = [];
    /** "relaxed" (matmul_r.c over two int8 activation terms) or "exact" (matmul_k.c). */
    this.precision = modules[3] ? "relaxed" : "exact";
    this.reset();
  }

  /** Fresh instances over a fresh memory: every weight, plan and scratch area is dropped,
   * the helper threads stop, and the old memory is left to the garbage collector. */
  reset() {
    this._stopHelpers();
    const [f32Module, blockModule, attendModule, relaxedModule] = this.modules;
    const memory = this.threads > 1
      ? new WebAssembly.Memory({ initial: 2, maximum: SHARED_PAGES, shared: true })
      : new WebAssembly.Memory({ initial: 2 });
    const env = { env: { memory } };
    const f32 = new WebAssembly.Instance(f32Module, env);
    const blocks = new WebAssembly.Instance(blockModule, env);
    this.memory = memory;
    this.control = new Int32Array(memory.buffer, CONTROL, JOB.INTS);
    this.f32 = f32.exports.matmul;
    // attend_f32.c (absent where a host passes only the matmul modules: the edge worker)
    this.attendKernel = attendModule ? new WebAssembly.Instance(attendModule, env).exports : null;
    this.sums16 = blocks.exports.sums16;
    if (relaxedModule) {  // same arguments; its codes and sums fit the scratch (_compute)
      const relaxed = new WebAssembly.Instance(relaxedModule, env);
      this.quantizeX = relaxed.exports.quantize_x8;
      this.blocks = relaxed.exports.matmul_r;
    } else {
      this.quantizeX = blocks.exports.quantize_x;
      this.blocks = blocks.exports.matmul_k;
    }
    this.plans = [];
    this.layers = [];
    this.layerScratch = { at: 0, size: 0 };
    this.top = PAGE;          // bump allocator; page 0 stays unused (the C kernels' stack)
    this.scratch = { at: 0, size: 0 };
  }

  /** Start the helper threads over the current memory (on the first weight placed, so they
   * boot while a model streams in, and a forgotten model leaves no idle threads behind). */
  _startHelpers() {
    for (let index = this.helpers.length + 1; index < this.threads; index++) {
      const helper = new Worker(new URL("./kernel_thread.js", import.meta.url), { type: "module" });
      const relaxed = Boolean(this.modules[3]);
      helper.postMessage({ module: this.modules[relaxed ? 3 : 1], entry: relaxed ? "matmul_r" : "matmul_k",
                           f32Module: this.modules[0], attendModule: this.modules[2],
                           memory: this.memory, control: CONTROL, index, threads: this.threads });
      this.helpers.push(helper);
    }
  }

  _stopHelpers() {
    if (this.control && this.helpers.length) {
      Atomics.store(this.control, JOB.STOP, 1);
      Atomics.add(this.control, JOB.GENERATION, 1);
      Atomics.notify(this.control, JOB.GENERATION);
    }
    for (const helper of this.helpers) helper.terminate();
    this.helpers = [];
  }

  /** Whether every helper thread has started (until then a job runs here alone). */
  _helpersReady() {
    for (let index = 1; index < this.threads; index++) {
      if (Atomics.load(this.control, JOB.READY + index) !== 1) return false;
    }
    return this.threads > 1;
  }

  /** The weights of a job, each thread its share of a quantized weight's rows (of a float32
   * weight's tokens, of its rows when T is 1); back when all are done. */
  _runJobs(jobs, nb, T, xq, sc, s16, acc, accBytes, x, cols) {
    const c = this.control;
    const threads = this._helpersReady() && jobs.length <= JOB.MAX_WEIGHTS ? this.threads : 1;
    if (threads > 1) {
      c[JOB.OP] = 0;
      c[JOB.COUNT] = jobs.length; c[JOB.NB] = nb; c[JOB.T] = T; c[JOB.XQ] = xq; c[JOB.SC] = sc;
      c[JOB.S16] = s16; c[JOB.ACC] = acc; c[JOB.ACC_BYTES] = accBytes; c[JOB.X] = x; c[JOB.COLS] = cols;
      jobs.forEach(([kind, handle, rows, y], w) => c.set([kind, handle, rows, y], JOB.WEIGHTS + 4 * w));
      this._post(threads);
    }
    for (const [kind, handle, rows, y] of jobs) {
      if (kind === KIND_PANELS) {
        this.attendKernel.gemm(handle, x, y, rows, cols, T, 0, threads);
        continue;
      }
      if (kind === KIND_F32) {
        f32Share(this.f32, handle, x, y, rows, cols, T, 0, threads);
        continue;
      }
      const [first, last] = rowShare(rows, 0, threads);
      if (first < last) this.blocks(kind, handle, xq, sc, s16, y, acc, acc + accBytes, rows, nb, T, first, last);
    }
    this._join(threads);
  }

  /** Hand the job in the control block to the `threads - 1` helpers. */
  _post(threads) {
    Atomics.store(this.control, JOB.PENDING, threads - 1);
    Atomics.add(this.control, JOB.GENERATION, 1);
    Atomics.notify(this.control, JOB.GENERATION);
  }

  /** Wait until the helpers are done (a short spin, then Atomics.wait). */
  _join(threads) {
    const c = this.control;
    for (let spin = 0; threads > 1 && Atomics.load(c, JOB.PENDING) !== 0; spin++) {
      const pending = Atomics.load(c, JOB.PENDING);
      if (spin > 4000 && pending !== 0) Atomics.wait(c, JOB.PENDING, pending);
    }
  }

  /** attend_f32.c's `name` (one of CALLS) with `args` (int32s) on every thread, each its
   * share; back when all are done. */
  call(name, args) {
    const threads = this._helpersReady() && args.length <= JOB.MAX_ARGS ? this.threads : 1;
    if (threads > 1) {
      this.control[JOB.OP] = CALLS.indexOf(name) + 1;
      this.control.set(args, JOB.ARGS);
      this._post(threads);
    }
    this.attendKernel[name](...args, 0, threads);
    this._join(threads);
  }

  /** Room for `bytes` of scratch (reused by every call; grown, never shrunk). */
  scratchArea(bytes) {
    if (bytes > this.scratch.size) this.scratch = { at: this._alloc(bytes), size: bytes };
    return this.scratch.at;
  }

  /** Bytes the kernels' memory holds now (weights and scratch). */
  bytesHeld() { return this.memory.buffer.byteLength; }

  _alloc(bytes) {
    if (this.helpers.length + 1 < this.threads) this._startHelpers();
    const at = align(this.top);
    const end = at + bytes;
    if (end > MEMORY_LIMIT) throw new RangeError(`kernel memory full: ${end} > ${MEMORY_LIMIT} bytes`);
    if (end > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((end - this.memory.buffer.byteLength) / PAGE));
    }
    this.top = end;
    return at;
  }

  /** Room for `bytes` of weight data; returns its address (its handle). */
  reserve(bytes) { return this._alloc(bytes); }

  /** Copy a Uint8Array (a range of a model file, straight from the cache or the network)
   * to `at` in kernel memory. */
  write(at, bytes) { new Uint8Array(this.memory.buffer).set(bytes, at); }

  /** Rows `ids` (comma-separated) of the weight at `at`, `rowBytes` each, as one Uint8Array
   * (an embedding lookup's blocks, decoded in Python). */
  readRows(at, rowBytes, ids) {
    const list = String(ids).split(",").map(Number);
    const out = new Uint8Array(list.length * rowBytes);
    const memory = new Uint8Array(this.memory.buffer);
    list.forEach((id, i) => out.set(memory.subarray(at + id * rowBytes, at + (id + 1) * rowBytes), i * rowBytes));
    return out;
  }

  /** Copy a float32 weight `[rows, cols]` (`length` bytes at `address` in the Python heap)
   * into kernel memory; returns its handle. */
  upload(address, length) {
    const at = this._alloc(length);
    this.write(at, this.heap().subarray(address, address + length));
    return at;
  }

  /** Copy a float32 weight `[rows, cols]` (at `address` in the Python heap) into kernel
   * memory packed in panels for attend_f32.c's `gemm` (kind KIND_PANELS); returns its
   * handle. */
  uploadPanels(address, rows, cols) {
    const bytes = Math.ceil(rows / PANEL) * PANEL * cols * 4;
    const at = this._alloc(bytes);
    const raw = this.scratchArea(rows * cols * 4);
    this.write(raw, this.heap().subarray(address, address + rows * cols * 4));
    this.attendKernel.pack_rows(raw, rows, cols, at);
    return at;
  }

  /** Copy a quantized weight's GGUF blocks (`length` bytes at `address` in the Python heap)
   * into kernel memory as they are; returns their handle. */
  uploadBlocks(kind, address, length) { return this.upload(address, length); }

  /** Register weights that share their input (q/k/v, gate/up, or one alone): JSON
   * `[[kind, handle, rows], ...]`. Returns the plan's id for `run`. */
  plan(json) {
    const list = JSON.parse(json);
    this.plans.push({ list, total: list.reduce((sum, [, , rows]) => sum + rows, 0),
                      quantized: list.some(([kind]) => kind !== KIND_F32 && kind !== KIND_PANELS) });
    return this.plans.length - 1;
  }

  /** Where a plan's scratch lies for `T` tokens of `cols` columns, and its bytes (`need`). */
  _layout(planId, cols, T) {
    const { total, quantized } = this.plans[planId];
    const nb = cols >> 5;
    const xBytes = T * cols * 4;
    // per 32-column block: the exact split's 64 int16 (128 bytes), or the relaxed kernel's
    // codes (q1, q2, c: 128 bytes) and, after all blocks, their two int32 sums
    const xqBytes = quantized ? T * nb * (128 + 8) : 0;
    const scBytes = quantized ? T * nb * 8 : 0;   // sc, then the same again for sums16
    // acc and macc: one f32x4 per token, per thread, each on cache lines of its own (the
    // kernels store them at every block: threads sharing a line slowed each other down)
    const accBytes = quantized ? lines(T * 16) : 0;
    const yBytes = T * total * 4;
    const need = align(xBytes) + xqBytes + 2 * scBytes + LINES + 2 * accBytes * this.threads + yBytes;
    return { nb, xBytes, xqBytes, scBytes, accBytes, yBytes, need };
  }

  /** Run a plan on `x [T, cols]` float32 (`source`: its bytes, a Uint8Array over either
   * memory); returns where the outputs `[T, rows_0]`, `[T, rows_1]`, ... lie in kernel
   * memory. */
  _compute(planId, cols, T, source) {
    const { list } = this.plans[planId];
    const { nb, xBytes, xqBytes, scBytes, accBytes, yBytes, need } = this._layout(planId, cols, T);
    const x = this.scratchArea(need);
    const xq = align(x + xBytes);
    const sc = xq + xqBytes;
    const s16 = sc + scBytes;
    const acc = lines(s16 + scBytes);
    const y = acc + 2 * accBytes * this.threads;
    new Uint8Array(this.memory.buffer, x, xBytes).set(source);
    if (this.plans[planId].quantized) this.quantizeX(x, nb, T, xq, sc);
    if (list.some(([kind]) => kind === KIND_Q2_K)) this.sums16(x, 2 * nb, T, s16);
    const jobs = [];
    let at = y;
    for (const [kind, handle, rows] of list) {
      jobs.push([kind, handle, rows, at]);
      at += T * rows * 4;
    }
    this._runJobs(jobs, nb, T, xq, sc, s16, acc, accBytes, x, cols);
    return { y, yBytes };
  }

  /** `_compute` on x `[T, cols]` float32 at `xAddress` in the Python heap. */
  _computeAt(planId, cols, T, xAddress) {
    return this._compute(planId, cols, T, this.heap().subarray(xAddress, xAddress + 4 * T * cols));
  }

  /** `_compute` on x in kernel memory (a Float32Array `[T, cols]` outside the scratch):
   * where the outputs lie (decoderLayer). */
  computeFrom(planId, cols, T, X) {
    return this._compute(planId, cols, T, new Uint8Array(X.buffer, X.byteOffset, 4 * T * cols)).y;
  }

  /** Register a decoder layer for `layer` (JSON: fused.js decoderLayer's `L`: its plans,
   * shapes and the kernel addresses of its norm weights and biases); returns its id. */
  layerPlan(json) {
    this.layers.push(JSON.parse(json));
    return this.layers.length - 1;
  }

  /** Room for a layer's `bytes` of intermediates, and the scratch of each of its
   * `[plan, cols]` for `T` tokens, made before any view is taken (memory growth would
   * detach them); returns where the intermediates go. */
  layerArea(T, bytes, plans) {
    for (const [planId, cols] of plans) this.scratchArea(this._layout(planId, cols, T).need);
    if (bytes > this.layerScratch.size) this.layerScratch = { at: this._alloc(bytes), size: bytes };
    return this.layerScratch.at;
  }

  /** Decoder layer `id` (layerPlan) on `x [T, d]` in the Python heap into `out`: one call
   * for the whole layer (fused.js decoderLayer has the arguments). */
  layer(id, ...args) { decoderLayer(this, this.layers[id], ...args); }

  /**
   * Run a plan on `x [T, cols]` float32 (at `xAddress` in the Python heap) and write the
   * outputs one after another, `[T, rows_0]`, then `[T, rows_1]`, ..., at `yAddress`:
   * one call between Python and JavaScript for the whole group.
   */
  run(planId, cols, T, xAddress, yAddress) {
    const { y, yBytes } = this._computeAt(planId, cols, T, xAddress);
    this.heap().set(new Uint8Array(this.memory.buffer, y, yBytes), yAddress);
  }

  /** A [gate, up] plan, then `act(gate) * up` `[T, rows]` written at `outAddress`; `act`
   * is one of GATES (fused.js): "silu" or "gelu_tanh". */
  runGlu(planId, cols, T, xAddress, outAddress, act = "silu") {
    const { y, yBytes } = this._computeAt(planId, cols, T, xAddress);
    const n = yBytes >> 3;
    const memory = this.memory.buffer;
    GATES[act](new Float32Array(memory, y, n), new Float32Array(memory, y + 4 * n, n),
               new Float32Array(this.heap().buffer, outAddress, n), n);
  }

  /** The fused per-layer kinds (kernels/fused.js) on arrays in the Python heap. */
  rmsNormAdd(...args) { rmsNormAdd(this.heap().buffer, ...args); }
  ropeStore(...args) { ropeStore(this.heap().buffer, ...args); }
  /** Whether ropeStore and attention take float16 caches (the browser has Float16Array). */
  get halfCaches() { return HALF_CACHES; }
  attention(...args) { attention(this.heap().buffer, ...args); }
}
