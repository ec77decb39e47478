/**
 * The job a quantized matmul hands to the shell's kernel threads (kernel_thread.js), kept as
 * int32s in a control block inside the kernels' shared memory, so a job costs no message:
 * the Pyodide worker writes it, bumps GENERATION and wakes the threads with Atomics.notify.
 * Every thread computes rows `rowShare(rows, index, threads)` of each weight (thread 0 is the
 * Pyodide worker itself).
 */
const MAX_WEIGHTS = 8;   // weights sharing one x in a plan (q/k/v, gate/up): at most 3 today

/** Int32 offsets in the control block. */
export const JOB = {
  GENERATION: 0, PENDING: 1, STOP: 2, COUNT: 3, NB: 4, T: 5, XQ: 6, SC: 7, S16: 8, ACC: 9,
  ACC_BYTES: 10, READY: 16, WEIGHTS: 64, MAX_WEIGHTS,
  INTS: 64 + 4 * MAX_WEIGHTS,
};

/** Rows [first, last) of thread `index` of `threads`: contiguous, in groups of four. */
export function rowShare(rows, index, threads) {
  const edge = (i) => (i >= threads ? rows : Math.min(rows, Math.floor((rows * i) / threads / 4) * 4));
  return [edge(index), edge(index + 1)];
}

/** Wait until `c[at]` differs from `seen` (a short spin, then Atomics.wait); its new value. */
export function waitForChange(c, at, seen) {
  for (let spin = 0; spin < 4000; spin++) {
    const now = Atomics.load(c, at);
    if (now !== seen) return now;
  }
  for (;;) {
    Atomics.wait(c, at, seen);
    const now = Atomics.load(c, at);
    if (now !== seen) return now;
  }
}
