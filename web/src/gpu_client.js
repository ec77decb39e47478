/**
 * The Pyodide worker's handle on the GPU worker (gpu_worker.js): the JavaScript half of the
 * browser's WebGPU device, which apr_webgpu.py (its Python half) calls synchronously.
 *
 *     const { client, reason } = await GpuClient.open(() => pyodide._module.HEAPU8);
 *     self.aprGpu = client;                    // apr_webgpu.BrowserGpuDevice wraps it
 *
 * Calls that create something (buffer, pipeline, group), writes and frees are posted and
 * return at once (messages keep their order); `run` and `fence` block in `Atomics.wait` on a
 * SharedArrayBuffer until the GPU worker answers, which needs a cross-origin isolated page
 * (`apr web` sends COOP/COEP). Arrays cross by address in Python's heap: a write copies
 * `length` bytes from there in chunks of CHUNK bytes, each transferred (never copied again)
 * to the GPU worker, waiting for it after every IN_FLIGHT bytes, so a model's upload holds
 * at most IN_FLIGHT bytes in flight beside Python's own copy.
 */
import { CONTROL } from "./gpu_protocol.js";

const CHUNK = 8 << 20;
const IN_FLIGHT = 64 << 20;
const FIRST_DATA = 1 << 20;           // the answer block; grown to the largest read-back
const TIMEOUT_MS = 15 * 60 * 1000;    // a step on a software adapter can take long

export class GpuClient {
  /** Start the GPU worker and open its device: `{client}`, or `{reason}` why not. */
  static async open(heap) {
    if (typeof SharedArrayBuffer === "undefined" || globalThis.crossOriginIsolated !== true) {
      return { reason: "the page is not cross-origin isolated (COOP/COEP headers): the WebGPU "
        + "device's synchronous read-back needs SharedArrayBuffer and Atomics.wait" };
    }
    if (!self.navigator.gpu) {
      return { reason: self.isSecureContext ? "this browser has no WebGPU (navigator.gpu)"
        : "WebGPU needs a secure context (https:// or http://127.0.0.1)" };
    }
    const worker = new Worker(new URL("./gpu_worker.js", import.meta.url), { type: "module" });
    const control = new SharedArrayBuffer(CONTROL.INTS * 4);
    const data = new SharedArrayBuffer(FIRST_DATA);
    const reply = await new Promise((resolve) => {
      worker.onmessage = ({ data: answer }) => resolve(answer);
      worker.onerror = (event) => resolve({ reason: `the GPU worker failed: ${event.message}` });
      worker.postMessage({ op: "init", control, data });
    });
    if (reply.reason) {
      worker.terminate();
      return { reason: reply.reason };
    }
    return { client: new GpuClient(worker, control, data, heap, reply) };
  }

  constructor(worker, control, data, heap, { adapter, cpu, limits }) {
    this.worker = worker;
    this.control = new Int32Array(control);
    this.data = new Uint8Array(data);
    this.heap = heap;            // () => Uint8Array over Python's memory (re-read: it grows)
    this.adapter = adapter;      // "google swiftshader", ...
    this.cpu = cpu;              // a software adapter
    this.limits = limits;
    this.submissions = 0;
    this.readbacks = 0;
    this.sizes = new Map();      // buffer handle -> bytes
    this.bytesHeld = 0;          // bytes of the device's live buffers
    this.inFlight = 0;
  }

  buffer(h, size, kind) {
    this.worker.postMessage({ op: "buffer", h, size, kind });
    this.sizes.set(h, size);
    this.bytesHeld += size;
  }

  /** Upload `length` bytes at `address` in Python's heap into buffer `h` at `offset`. */
  write(h, offset, address, length) {
    for (let at = 0; at < length; at += CHUNK) {
      const n = Math.min(CHUNK, length - at);
      const bytes = this.heap().slice(address + at, address + at + n).buffer;
      this.worker.postMessage({ op: "write", h, offset: offset + at, bytes }, [bytes]);
      this.inFlight += n;
      if (this.inFlight >= IN_FLIGHT) {
        const error = this.fence();
        if (error) return error;
      }
    }
    return "";
  }

  pipeline(h, key, wgsl) { this.worker.postMessage({ op: "pipeline", h, key, wgsl }); }

  /** `entriesJson`: [[binding, buffer handle, offset, size (0: the rest)]]. */
  group(h, pipeline, entriesJson) {
    this.worker.postMessage({ op: "group", h, pipeline, entries: JSON.parse(entriesJson) });
  }

  free(h) {
    this.worker.postMessage({ op: "free", h });
    if (this.sizes.has(h)) {
      this.bytesHeld -= this.sizes.get(h);
      this.sizes.delete(h);
    }
  }

  /** One submission of `count` op ints (Uint32 at `opsAddress` in Python's heap), then
   * `nbytes` of buffer `readback` copied to `outAddress`; "" or the error's message. */
  run(opsAddress, count, readback, nbytes, outAddress) {
    const ops = new Uint32Array(this.heap().slice(opsAddress, opsAddress + 4 * count).buffer);
    const message = { op: "run", ops, readback, nbytes };
    if (nbytes > this.data.length) {
      let size = this.data.length;
      while (size < nbytes) size *= 2;
      this.data = new Uint8Array(new SharedArrayBuffer(size));
      message.data = this.data.buffer;
    }
    const error = this._call(message, [ops.buffer]);
    if (error) return error;
    this.heap().set(this.data.subarray(0, nbytes), outAddress);
    return "";
  }

  /** Wait until the GPU worker has done every earlier message; "" or the first error. */
  fence() { return this._call({ op: "fence" }, []); }

  _call(message, transfer) {
    const c = this.control;
    Atomics.store(c, CONTROL.STATE, 0);
    this.worker.postMessage(message, transfer);
    if (Atomics.wait(c, CONTROL.STATE, 0, TIMEOUT_MS) === "timed-out") {
      return `the GPU worker did not answer ${message.op} within ${TIMEOUT_MS / 1000} s`;
    }
    this.inFlight = 0;
    this.submissions = c[CONTROL.SUBMISSIONS];
    this.readbacks = c[CONTROL.READBACKS];
    if (c[CONTROL.STATUS] === 0) return "";
    return new TextDecoder().decode(this.data.slice(0, c[CONTROL.LENGTH])) || "WebGPU error";
  }
}
