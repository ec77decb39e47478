/**
 * The shell's WebGPU device: a dedicated Worker that owns the GPUDevice and executes the
 * device protocol of apr_core.gpu.forward (see apr_webgpu.py, its Python half, and
 * gpu_client.js, which the Pyodide worker talks to it through).
 *
 * Why a worker of its own: the protocol's `run` is synchronous (Python in Pyodide 0.17 cannot
 * await), but WebGPU's read-back (`mapAsync`) resolves on an event loop. The Pyodide worker
 * posts every call here in order and, for the calls that answer (`run`, `fence`), blocks in
 * `Atomics.wait` on a shared control block until this worker writes the answer and notifies.
 *
 * Messages (handles are small integers the Python side chose, so only `run` and `fence`
 * answer):
 *   {op: "init", control, data}          -> postMessage({adapter, limits} | {reason})
 *   {op: "buffer", h, size, kind}         kind: weight data step params readback kv
 *   {op: "write", h, offset, bytes}       bytes: a transferred ArrayBuffer
 *   {op: "pipeline", h, key, wgsl}
 *   {op: "group", h, pipeline, entries}   entries: [[binding, buffer, offset, size]]
 *   {op: "free", h}                       a handle Python dropped (buffers are destroyed)
 *   {op: "run", ops, readback, nbytes, data?}  ops: Int32Array (gpu_protocol.js OPS);
 *                                          one submission, one map of `readback`
 *   {op: "fence"}                         answers once every earlier message is done
 * Answers go to the control block (Int32Array over a SharedArrayBuffer, gpu_protocol.js) and
 * the data block (the read-back bytes, or an error message in UTF-8).
 */

import { CONTROL, LIMITS, OPS } from "./gpu_protocol.js";

let device = null;
let control = null;   // Int32Array over the shared control block
let data = null;      // Uint8Array over the shared data block
let firstError = null;
let submissions = 0;
let readbacks = 0;
const objects = new Map();   // handle -> GPUBuffer | GPUComputePipeline | GPUBindGroup
let queue = Promise.resolve();

function usage(kind) {
  const u = GPUBufferUsage;
  if (kind === "params") return u.UNIFORM | u.COPY_DST;
  if (kind === "readback") return u.MAP_READ | u.COPY_DST;
  return u.STORAGE | u.COPY_DST | u.COPY_SRC;
}

function adapterName(info) {
  const parts = [info.vendor, info.architecture, info.device, info.description].filter(Boolean);
  return parts.length ? parts.join(" ") : "unknown adapter";
}

async function init() {
  if (!self.navigator.gpu) {
    return { reason: self.isSecureContext ? "this browser has no WebGPU (navigator.gpu)"
      : "WebGPU needs a secure context (https:// or http://127.0.0.1)" };
  }
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) return { reason: "no WebGPU adapter (navigator.gpu.requestAdapter() gave none)" };
  const requiredLimits = {};
  for (const name of LIMITS) if (adapter.limits[name] !== undefined) requiredLimits[name] = adapter.limits[name];
  device = await adapter.requestDevice({ requiredLimits });
  device.addEventListener("uncapturederror", (event) => { firstError = firstError || event.error.message; });
  device.lost.then((info) => { firstError = firstError || `WebGPU device lost: ${info.message}`; });
  const info = adapter.info || {};
  // A CPU rasterizer (SwiftShader) runs a thread per matmul row best, as lavapipe natively.
  const cpu = Boolean(info.isFallbackAdapter) || /swiftshader|llvmpipe|lavapipe/i.test(info.architecture || "");
  const limits = {};
  for (const name of LIMITS) limits[name] = device.limits[name];
  return { adapter: adapterName(info), cpu, limits };
}

function answer(status, bytes = null) {
  let length = 0;
  if (bytes) {
    length = bytes.length;
    data.set(bytes, 0);
  }
  control[CONTROL.STATUS] = status;
  control[CONTROL.LENGTH] = length;
  control[CONTROL.SUBMISSIONS] = submissions;
  control[CONTROL.READBACKS] = readbacks;
  Atomics.store(control, CONTROL.STATE, 1);
  Atomics.notify(control, CONTROL.STATE);
}

function fail(message) {
  const text = new TextEncoder().encode(String(message)).subarray(0, data.length);
  answer(1, text);
}

function encode(ops) {
  const encoder = device.createCommandEncoder();
  let pass = null;
  for (let at = 0; at < ops.length; at += OPS.WIDTH) {
    const code = ops[at];
    if (code === OPS.DISPATCH) {
      if (!pass) pass = encoder.beginComputePass();
      pass.setPipeline(objects.get(ops[at + 1]));
      pass.setBindGroup(0, objects.get(ops[at + 2]));
      pass.dispatchWorkgroups(ops[at + 3], ops[at + 4], ops[at + 5]);
      continue;
    }
    if (pass) { pass.end(); pass = null; }
    if (code === OPS.COPY) {
      encoder.copyBufferToBuffer(objects.get(ops[at + 1]), ops[at + 2], objects.get(ops[at + 3]), ops[at + 4], ops[at + 5]);
    } else if (code === OPS.CLEAR) {
      encoder.clearBuffer(objects.get(ops[at + 1]), ops[at + 2], ops[at + 3]);
    } else {
      throw new Error(`unknown device op ${code}`);
    }
  }
  if (pass) pass.end();
  return encoder.finish();
}

async function run({ ops, readback, nbytes }) {
  if (firstError) throw new Error(firstError);
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  device.queue.submit([encode(ops)]);
  submissions += 1;
  const buffer = objects.get(readback);
  const errors = [await device.popErrorScope(), await device.popErrorScope()].filter(Boolean);
  if (errors.length) throw new Error(errors[0].message);
  await buffer.mapAsync(GPUMapMode.READ, 0, nbytes);
  readbacks += 1;
  try {
    if (nbytes > data.length) throw new Error(`read-back of ${nbytes} bytes exceeds the data block`);
    answer(0, new Uint8Array(buffer.getMappedRange(0, nbytes)));
  } finally {
    buffer.unmap();
  }
}

const handlers = {
  buffer({ h, size, kind }) { objects.set(h, device.createBuffer({ size, usage: usage(kind) })); },
  write({ h, offset, bytes }) { device.queue.writeBuffer(objects.get(h), offset, bytes); },
  pipeline({ h, key, wgsl }) {
    const module = device.createShaderModule({ label: key, code: wgsl });
    objects.set(h, device.createComputePipeline({ label: key, layout: "auto", compute: { module, entryPoint: "main" } }));
  },
  group({ h, pipeline, entries }) {
    const layout = objects.get(pipeline).getBindGroupLayout(0);
    objects.set(h, device.createBindGroup({ layout, entries: entries.map(([binding, buf, offset, size]) => {
      const buffer = objects.get(buf);
      return { binding, resource: { buffer, offset, size: size || buffer.size - offset } };
    }) }));
  },
  free({ h }) {
    const object = objects.get(h);
    objects.delete(h);
    if (object && typeof object.destroy === "function") object.destroy();
  },
  run,
  fence() {
    if (firstError) throw new Error(firstError);
    answer(0);
  },
};

const ANSWERING = new Set(["run", "fence"]);

self.onmessage = ({ data: message }) => {
  if (message.op === "init") {
    control = new Int32Array(message.control);
    data = new Uint8Array(message.data);
    init().then((result) => self.postMessage(result),
      (err) => self.postMessage({ reason: `WebGPU device request failed: ${err.message || err}` }));
    return;
  }
  // One device, one order: every message runs after the previous one finished.
  queue = queue.then(async () => {
    try {
      if (message.data) data = new Uint8Array(message.data);   // a larger data block
      if (!handlers[message.op]) throw new Error(`unknown GPU worker op ${message.op}`);
      await handlers[message.op](message);
    } catch (err) {
      if (ANSWERING.has(message.op)) fail(err.message || err);
      else firstError = firstError || `${message.op}: ${err.message || err}`;
    }
  });
};
