/**
 * The speech page's attention and GELU on attend_f32.c (through a SimdMatmul's memory and
 * helper threads: `simd.call`), over numpy arrays in the Python runtime's memory passed by
 * address (apr_webspeech.py plugs them into Whisper's seams):
 *  - `attend`: one head of the encoder's attention (k and v packed once a call, the query
 *    rows shared by the threads);
 *  - `crossPlace` / `crossAttend` / `crossFree`: the decoder's cross-attention, each
 *    window's K^T and V copied into kernel memory once (a slot) and read there by every
 *    step;
 *  - `gelu`: Whisper's exact-erf GELU in place;
 *  - `stftBasis` / `stft`: the log-mel's float64 STFT product (the DFT basis packed once),
 *    frames read in place from a copy of the samples they cover, shared by the threads.
 */
import { PANEL } from "./simd_kernel.js";

const align = (n) => (n + 15) & ~15;
const up = (n, m) => Math.ceil(n / m) * m;
/** Elements below which an elementwise job runs on this thread alone. */
const SMALL = 1 << 16;
const floatBits = (x) => new Int32Array(new Float32Array([x]).buffer)[0];

export class SpeechKernels {
  constructor(simd) {
    this.simd = simd;
    this.slots = [];          // cross K^T / V areas: {at, bytes, free}
    this.memory = null;       // the kernel memory the slots are in (reset() drops them)
  }

  /** Float32 view of `count` values at `address` in the Python heap. */
  _heap(address, count) {
    const heap = this.simd.heap();
    return new Float32Array(heap.buffer, heap.byteOffset + address, count);
  }

  /** Float32 view of kernel memory. */
  _kernel(at, count) { return new Float32Array(this.simd.memory.buffer, at, count); }

  /** Consecutive scratch areas of the given float counts; their addresses. */
  _scratch(counts) {
    let at = this.simd.scratchArea(counts.reduce((sum, n) => sum + align(4 * n), 0));
    return counts.map((n) => { const here = at; at += align(4 * n); return here; });
  }

  /** One head: q `[T, dh]` (already scaled), k and v `[S, dh]` -> out `[T, dh]`
   * (attend_f32.c's attend_rows: scores, softmax and probs v per block of query rows). */
  attend(qAddress, kAddress, vAddress, T, S, dh, outAddress) {
    const Sp = up(S, PANEL);
    const threads = this.simd.threads;
    const [kRaw, vRaw, kp, vp, q, out, s] = this._scratch(
      [S * dh, S * dh, Sp * dh, Sp * up(dh, PANEL), T * dh, T * dh,
       threads * this.simd.attendKernel.attend_scratch(Sp)]);
    this._kernel(kRaw, S * dh).set(this._heap(kAddress, S * dh));
    this._kernel(vRaw, S * dh).set(this._heap(vAddress, S * dh));
    this._kernel(q, T * dh).set(this._heap(qAddress, T * dh));
    const kernel = this.simd.attendKernel;
    kernel.pack_rows(kRaw, S, dh, kp);
    kernel.pack_cols(vRaw, S, dh, Sp, vp);
    this.simd.call("attend_rows", [q, kp, vp, out, s, T, S, Sp, dh]);
    this._heap(outAddress, T * dh).set(this._kernel(out, T * dh));
  }

  /** Copy one window's cross K^T `[H, dh, S]` and V `[H, S, dh]` (Python heap) into a slot
   * of kernel memory, K^T's rows padded to a multiple of 4 keys; returns the slot. */
  crossPlace(kAddress, vAddress, H, dh, S) {
    if (this.memory !== this.simd.memory) { this.slots = []; this.memory = this.simd.memory; }
    const Sp = up(S, 4);
    const bytes = align(4 * H * dh * Sp) + 4 * H * S * dh;
    let slot = this.slots.findIndex((area) => area.free && area.bytes === bytes);
    if (slot < 0) {
      this.slots.push({ at: this.simd.reserve(bytes), bytes, free: false });
      slot = this.slots.length - 1;
    }
    const area = Object.assign(this.slots[slot], { free: false, H, dh, S, Sp });
    const kt = this._kernel(area.at, H * dh * Sp);
    const from = this._heap(kAddress, H * dh * S);
    for (let row = 0; row < H * dh; row++) {
      kt.set(from.subarray(row * S, (row + 1) * S), row * Sp);
      kt.fill(0, row * Sp + S, (row + 1) * Sp);
    }
    area.v = area.at + align(4 * H * dh * Sp);
    this._kernel(area.v, H * S * dh).set(this._heap(vAddress, H * S * dh));
    return slot;
  }

  /** The slot may be reused (its window's K/V are gone). */
  crossFree(slot) {
    if (this.memory === this.simd.memory && this.slots[slot]) this.slots[slot].free = true;
  }

  /** Cross-attention of q `[R, H, dh]` over slot `slot` -> out `[R, H * dh]`: scores by
   * q * scale (float32), softmax, probs v over the sum (attend_f32.c's cross_attend). On
   * this thread alone: a step reads the window's K/V at memory speed in under a
   * millisecond, about what waking a helper costs on a busy machine. */
  crossAttend(slot, R, qAddress, scale, outAddress) {
    const { at, v, H, dh, S, Sp } = this.slots[slot];
    const n = R * H * dh;
    const [q, out, s] = this._scratch([n, n, Sp]);
    this._kernel(q, n).set(this._heap(qAddress, n));
    this.simd.attendKernel.cross_attend(q, at, v, out, s, R, H, dh, S, Sp, floatBits(scale), 0, 1);
    this._heap(outAddress, n).set(this._kernel(out, n));
  }

  /** Pack the DFT basis `[K, N]` float64 (Python heap) for `stft`; returns its handle. */
  stftBasis(address, K, N) {
    const bytes = 8 * up(N, 4) * K;
    const at = this.simd.reserve(bytes);
    const [raw] = this._scratch([2 * K * N]);
    new Uint8Array(this.simd.memory.buffer, raw, 8 * K * N)
      .set(this.simd.heap().subarray(address, address + 8 * K * N));
    this.simd.attendKernel.pack_cols_f64(raw, K, N, at);
    return at;
  }

  /** The spectrum `[T, N]` float64 (at `outAddress`) of T frames of K float32 samples,
   * `hop` samples apart from `address` (Python heap), times the basis at `basis`. */
  stft(basis, address, hop, T, K, N, outAddress) {
    const span = (T - 1) * hop + K;
    const [x, y] = this._scratch([span, 2 * T * N]);
    this._kernel(x, span).set(this._heap(address, span));
    this.simd.call("gemm_f64", [basis, x, hop, y, N, K, T]);
    this.simd.heap().set(new Uint8Array(this.simd.memory.buffer, y, 8 * T * N), outAddress);
  }

  /** x = gelu(x) for `n` (a multiple of 4) float32 values at `address` in the Python heap
   * (a decoder step's few thousand here alone: waking the helpers costs more). */
  gelu(address, n) {
    const [x] = this._scratch([n]);
    this._kernel(x, n).set(this._heap(address, n));
    if (n < SMALL) this.simd.attendKernel.gelu_erf(x, n, 0, 1);
    else this.simd.call("gelu_erf", [x, n]);
    this._heap(address, n).set(this._kernel(x, n));
  }
}
