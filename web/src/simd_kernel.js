/**
 * The shell's WebAssembly SIMD matmul (kernels/matmul_f32.wat), which apr_core reaches through
 * its kernel registry (apr_webkernel.py registers it as backend "wasm-simd"). Weights are
 * uploaded once as float32 into the kernel's own memory; each call copies `x` in and `y` out.
 */
import { wasmBase64 } from "./kernels/matmul_f32.wasm.js";

const PAGE = 65536;
const align = (n) => (n + 15) & ~15;

export class SimdMatmul {
  /** Compile and instantiate the kernel; rejects where WebAssembly SIMD is unavailable. */
  static async create() {
    const bytes = Uint8Array.from(atob(wasmBase64), (c) => c.charCodeAt(0));
    const { instance } = await WebAssembly.instantiate(bytes);
    return new SimdMatmul(instance);
  }

  constructor(instance) {
    this.memory = instance.exports.memory;
    this.kernel = instance.exports.matmul;
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

  /** Copy a float32 weight `[rows, cols]` (as bytes) into kernel memory; returns its handle. */
  upload(bytes) {
    const at = this._alloc(bytes.length);
    new Uint8Array(this.memory.buffer, at, bytes.length).set(bytes);
    return at;
  }

  /** `x [T, cols]` (float32 bytes) times the uploaded `W.T` -> `y [T, rows]` float32. */
  matmul(handle, rows, cols, xBytes, T) {
    return this.matmulGroup(JSON.stringify([[handle, rows]]), cols, xBytes, T);
  }

  /**
   * Several weights that share `x` (q/k/v, gate/up) in one call, which saves a round trip
   * between Python and JavaScript per weight. `weights`: JSON `[[handle, rows], ...]`.
   * Returns the outputs one after another: `[T, rows_0]`, then `[T, rows_1]`, ...
   */
  matmulGroup(weights, cols, xBytes, T) {
    const list = JSON.parse(weights);
    const total = list.reduce((sum, [, rows]) => sum + rows, 0);
    const need = align(xBytes.length) + T * total * 4;
    if (need > this.scratch.size) this.scratch = { at: this._alloc(need), size: need };
    const x = this.scratch.at;
    const y = align(x + xBytes.length);
    new Uint8Array(this.memory.buffer, x, xBytes.length).set(xBytes);
    let at = y;
    for (const [handle, rows] of list) {
      this.kernel(handle, x, at, rows, cols, T);
      at += T * rows * 4;
    }
    return new Float32Array(this.memory.buffer.slice(y, at));
  }
}
