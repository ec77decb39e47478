/**
 * What the Pyodide worker (gpu_client.js) and the GPU worker (gpu_worker.js) share: the
 * layout of the control block the GPU worker answers in, and the op codes of a run.
 */

/** Int32 slots of the control block (a SharedArrayBuffer): STATE goes 0 -> 1 when an
 * answer is ready; STATUS 0 ok, 1 error (the message in the data block); LENGTH bytes in
 * the data block; the device's counters after the call. */
export const CONTROL = { STATE: 0, STATUS: 1, LENGTH: 2, SUBMISSIONS: 3, READBACKS: 4, INTS: 8 };
/** Op codes of a run's Int32Array, OPS.WIDTH ints an op (unused trailing ints are 0):
 * DISPATCH pipeline group x y z | COPY src src_off dst dst_off n | CLEAR buf off n. */
export const OPS = { DISPATCH: 0, COPY: 1, CLEAR: 2, WIDTH: 6 };
/** Adapter limits requested at their maximum (what the plan sizes its buffers by). */
export const LIMITS = ["maxStorageBufferBindingSize", "maxBufferSize", "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
  "maxUniformBufferBindingSize"];
