/**
 * The shell's WebAssembly SIMD kernels, which apr_core reaches through its kernel registry
 * (apr_webkernel.py registers them as backend "wasm-simd"):
 *  - kernels/matmul_f32.wat: a float32 matmul over weights dequantized once at upload;
 *  - kernels/matmul_q.wat: Q4_1 and Q8_0 matmuls over repacked GGUF blocks, which share the
 *    f32 module's memory.
 * Weights are uploaded once into that memory; each call copies `x` in and `y` out of the
 * Python runtime's memory by address.
 */
import { wasmBase64 as f32Base64 } from "./kernels/matmul_f32.wasm.js";
import { wasmBase64 as quantBase64 } from "./kernels/matmul_q.wasm.js";
import { attention, rmsNormAdd, ropeStore, siluMul } from "./kernels/fused.js";

const PAGE = 65536;
const align = (n) => (n + 15) & ~15;
const decode = (base64) => Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
/** Kind codes of apr_webkernel.QUANTIZED (0: float32); quantized weights hold 32-column blocks. */
const KIND_F32 = 0;
/** Bytes of a kernel record (four rows of one 32-column block) per quantized kind. */
const RECORD_BYTES = { 1: 96, 2: 144 };

export class SimdMatmul {
  /**
   * Compile and instantiate the kernels; rejects where WebAssembly SIMD is unavailable.
   * `heap()` returns a Uint8Array over the Python runtime's memory (re-read on every call:
   * it is replaced when that memory grows); weights, `x` and `y` are passed by address in it.
   */
  static async create(heap) {
    const f32 = (await WebAssembly.instantiate(decode(f32Base64))).instance;
    const quant = (await WebAssembly.instantiate(decode(quantBase64),
      { env: { memory: f32.exports.memory } })).instance;
    return new SimdMatmul(f32, quant, heap);
  }

  constructor(f32, quant, heap) {
    this.memory = f32.exports.memory;
    this.heap = heap;
    // kind -> kernel(w, xq, sc, y, groups, nb, T); kind 0 is the f32 kernel
    this.kernels = { 1: quant.exports.q4_1, 2: quant.exports.q8_0 };
    this.f32 = f32.exports.matmul;
    this.quantizeX = quant.exports.quantize_x;
    this.pack = quant.exports.pack;
    this.staging = { at: 0, size: 0 };
    this.plans = [];
    this.top = PAGE;          // bump allocator; page 0 stays unused
    this.scratch = { at: 0, size: 0 };
  }

  _alloc(bytes) {
    const at = align(this.top);
    const end = at + bytes;
    if (end > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((end - this.memory.buffer.byteLength) / PAGE));
    }
    this.top = end;
    return at;
  }

  /** Copy a float32 weight `[rows, cols]` (`length` bytes at `address` in the Python heap)
   * into kernel memory; returns its handle. */
  upload(address, length) {
    const at = this._alloc(length);
    new Uint8Array(this.memory.buffer, at, length)
      .set(this.heap().subarray(address, address + length));
    return at;
  }

  /** Upload a quantized weight `[rows, cols]` as its GGUF blocks (`length` bytes at
   * `address` in the Python heap) and repack them into the kernel's records; returns the
   * records' handle. The blocks pass through a staging area reused by every upload. */
  uploadBlocks(kind, address, length, rows, cols) {
    const nb = cols >> 5;
    const at = this._alloc(RECORD_BYTES[kind] * (rows >> 2) * nb);
    if (length > this.staging.size) this.staging = { at: this._alloc(length), size: length };
    new Uint8Array(this.memory.buffer, this.staging.at, length)
      .set(this.heap().subarray(address, address + length));
    this.pack(kind, this.staging.at, at, rows, nb);
    return at;
  }

  /** Register weights that share their input (q/k/v, gate/up, or one alone): JSON
   * `[[kind, handle, rows], ...]`. Returns the plan's id for `run`. */
  plan(json) {
    const list = JSON.parse(json);
    this.plans.push({ list, total: list.reduce((sum, [, , rows]) => sum + rows, 0),
                      quantized: list.some(([kind]) => kind !== KIND_F32) });
    return this.plans.length - 1;
  }

  /** Run a plan on `x [T, cols]` float32 at `xAddress` in the Python heap; returns where
   * the outputs `[T, rows_0]`, `[T, rows_1]`, ... lie in kernel memory. */
  _compute(planId, cols, T, xAddress) {
    const { list, total, quantized } = this.plans[planId];
    const nb = cols >> 5;
    const xBytes = T * cols * 4;
    const xqBytes = quantized ? T * nb * 128 : 0;
    const scBytes = quantized ? T * nb * 8 : 0;
    const yBytes = T * total * 4;
    const need = align(xBytes) + xqBytes + scBytes + yBytes;
    if (need > this.scratch.size) this.scratch = { at: this._alloc(need), size: need };
    const x = this.scratch.at;
    const xq = align(x + xBytes);
    const sc = xq + xqBytes;
    const y = sc + scBytes;
    new Uint8Array(this.memory.buffer, x, xBytes)
      .set(this.heap().subarray(xAddress, xAddress + xBytes));
    if (quantized) this.quantizeX(x, nb, T, xq, sc);
    let at = y;
    for (const [kind, handle, rows] of list) {
      if (kind === KIND_F32) this.f32(handle, x, at, rows, cols, T);
      else this.kernels[kind](handle, xq, sc, at, rows >> 2, nb, T);
      at += T * rows * 4;
    }
    return { y, yBytes };
  }

  /**
   * Run a plan on `x [T, cols]` float32 (at `xAddress` in the Python heap) and write the
   * outputs one after another, `[T, rows_0]`, then `[T, rows_1]`, ..., at `yAddress`:
   * one call between Python and JavaScript for the whole group.
   */
  run(planId, cols, T, xAddress, yAddress) {
    const { y, yBytes } = this._compute(planId, cols, T, xAddress);
    this.heap().set(new Uint8Array(this.memory.buffer, y, yBytes), yAddress);
  }

  /** A [gate, up] plan, then `silu(gate) * up` `[T, rows]` written at `outAddress`. */
  runGlu(planId, cols, T, xAddress, outAddress) {
    const { y, yBytes } = this._compute(planId, cols, T, xAddress);
    const n = yBytes >> 3;
    const memory = this.memory.buffer;
    siluMul(new Float32Array(memory, y, n), new Float32Array(memory, y + 4 * n, n),
            new Float32Array(this.heap().buffer, outAddress, n), n);
  }

  /** The fused per-layer kinds (kernels/fused.js) on arrays in the Python heap. */
  rmsNormAdd(...args) { rmsNormAdd(this.heap().buffer, ...args); }
  ropeStore(...args) { ropeStore(this.heap().buffer, ...args); }
  attention(...args) { attention(this.heap().buffer, ...args); }
}
