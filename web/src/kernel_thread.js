/**
 * A helper thread of the shell's matmuls (simd_kernel.js, KernelThreads): a Web Worker that
 * instantiates the block kernel (matmul_k, or matmul_r on relaxed SIMD), the float32 one and
 * attend_f32.c's over the kernels' shared WebAssembly memory and computes its share of every
 * weight's rows (float32 weights: of the tokens) for each job the Pyodide worker posts
 * there, or its share of one of attend_f32.c's calls.
 *
 * Protocol: one message `{module, entry, f32Module, attendModule, memory, control, index,
 * threads}` at start; after that, only the control block (Int32Array in the shared memory,
 * layout in kernel_jobs.js): the Pyodide worker bumps GENERATION, this thread runs the job
 * and decrements PENDING, waking the Pyodide worker when it reaches 0.
 */
import { CALLS, f32Share, JOB, KIND_PANELS, rowShare, waitForChange } from "./kernel_jobs.js";

self.onmessage = ({ data }) => {
  const { module, entry, f32Module, attendModule, memory, control, index, threads } = data;
  const matmul = new WebAssembly.Instance(module, { env: { memory } }).exports[entry];
  const f32 = new WebAssembly.Instance(f32Module, { env: { memory } }).exports.matmul;
  const attend = new WebAssembly.Instance(attendModule, { env: { memory } }).exports;
  const c = new Int32Array(memory.buffer, control, JOB.INTS);
  Atomics.store(c, JOB.READY + index, 1);
  let seen = Atomics.load(c, JOB.GENERATION);
  for (;;) {
    seen = waitForChange(c, JOB.GENERATION, seen);
    if (Atomics.load(c, JOB.STOP)) return;
    const op = c[JOB.OP];
    if (op > 0) {
      const call = attend[CALLS[op - 1]];   // its arguments, then (index, threads)
      call(...c.subarray(JOB.ARGS, JOB.ARGS + call.length - 2), index, threads);
      if (Atomics.sub(c, JOB.PENDING, 1) === 1) Atomics.notify(c, JOB.PENDING);
      continue;
    }
    const nb = c[JOB.NB], T = c[JOB.T], xq = c[JOB.XQ], sc = c[JOB.SC], s16 = c[JOB.S16];
    const acc = c[JOB.ACC] + index * 2 * c[JOB.ACC_BYTES];
    const macc = acc + c[JOB.ACC_BYTES];
    for (let w = 0; w < c[JOB.COUNT]; w++) {
      const at = JOB.WEIGHTS + 4 * w;
      const [kind, handle, rows, y] = [c[at], c[at + 1], c[at + 2], c[at + 3]];
      if (kind === KIND_PANELS) {
        attend.gemm(handle, c[JOB.X], y, rows, c[JOB.COLS], T, index, threads);
        continue;
      }
      if (kind === 0) {   // float32: this thread's tokens of x [T, cols] and y [T, rows]
        f32Share(f32, handle, c[JOB.X], y, rows, c[JOB.COLS], T, index, threads);
        continue;
      }
      const [first, last] = rowShare(rows, index, threads);
      if (first < last) matmul(kind, handle, xq, sc, s16, y, acc, macc, rows, nb, T, first, last);
    }
    if (Atomics.sub(c, JOB.PENDING, 1) === 1) Atomics.notify(c, JOB.PENDING);
  }
};
