/**
 * The job a quantized matmul hands to the shell's kernel threads (kernel_thread.js), kept as
 * int32s in a control block inside the kernels' shared memory, so a job costs no message:
 * the Pyodide worker writes it, bumps GENERATION and wakes the threads with Atomics.notify.
 * Every thread computes rows `rowShare(rows, index, threads)` of each quantized weight and
 * tokens `tokenShare(T, index, threads)` of each float32 one (kind 0; its rows when T is
 * 1: `f32Share`; of a panel-packed one's, `gemm` splits them itself) (thread 0 is the
 * Pyodide worker itself). A job can also be one of attend_f32.c's calls (OP, ARGS).
 */
const MAX_WEIGHTS = 8;   // weights sharing one x in a plan (q/k/v, gate/up): at most 3 today

/** Int32 offsets in the control block. OP 0 is a plan's weights (the fields up to COLS);
 * OP i > 0 calls CALLS[i - 1] of attend_f32.c with ARGS and (index, threads). */
export const JOB = {
  GENERATION: 0, PENDING: 1, STOP: 2, COUNT: 3, NB: 4, T: 5, XQ: 6, SC: 7, S16: 8, ACC: 9,
  ACC_BYTES: 10, X: 11, COLS: 12, OP: 13, READY: 16, WEIGHTS: 64, MAX_WEIGHTS,
  ARGS: 64 + 4 * MAX_WEIGHTS, MAX_ARGS: 16, INTS: 64 + 4 * MAX_WEIGHTS + 16,
};

/** attend_f32.c's jobs the threads share (each takes `index, threads` after its ARGS). */
export const CALLS = ["attend_rows", "gelu_erf", "gemm_f64"];

/** A float32 weight packed in panels for attend_f32.c's `gemm` (apr_webkernel.KIND_PANELS). */
export const KIND_PANELS = 100;

/** Rows [first, last) of thread `index` of `threads`: contiguous, in groups of four. */
export function rowShare(rows, index, threads) {
  const edge = (i) => (i >= threads ? rows : Math.min(rows, Math.floor((rows * i) / threads / 4) * 4));
  return [edge(index), edge(index + 1)];
}

/** Tokens [first, last) of thread `index` of `threads`: a float32 weight's share of a job
 * (its kernel runs token by token, so many-token jobs split by tokens). */
export function tokenShare(T, index, threads) {
  return [Math.floor((T * index) / threads), Math.floor((T * (index + 1)) / threads)];
}

/** Thread `index`'s share of a float32 weight `[rows, cols]` at `w` times x `[T, cols]`
 * into y `[T, rows]` (`f32`: matmul_f32.wat's kernel): its tokens, or its rows when T is 1. */
export function f32Share(f32, w, x, y, rows, cols, T, index, threads) {
  if (T === 1 && threads > 1) {
    const [first, last] = rowShare(rows, index, threads);
    if (first < last) f32(w + 4 * first * cols, x, y + 4 * first, last - first, cols, 1);
    return;
  }
  const [first, last] = tokenShare(T, index, threads);
  if (first < last) f32(w, x + 4 * first * cols, y + 4 * first * rows, rows, cols, last - first);
}

/** How long a helper spins for the next job before it sleeps in Atomics.wait: a decode
 * step's jobs come tens of microseconds apart (a layer's attention between its q/k/v and o
 * products, a layer's few loops), and a sleeping helper costs each job a futex wake and a
 * late start. 4000 loads (~20 us) before: at 2 ms, SmolLM2 decoded 1.06-1.13x faster (median
 * of 6-10 alternating runs, Chromium at --isa avx2, load 1.3-2). */
const SPIN_MS = 2;

/** Wait until `c[at]` differs from `seen` (a spin of up to SPIN_MS, then Atomics.wait); its
 * new value. */
export function waitForChange(c, at, seen) {
  const until = performance.now() + SPIN_MS;
  for (let spin = 0; ; spin++) {
    const now = Atomics.load(c, at);
    if (now !== seen) return now;
    // (the count bounds it where a host's clock stands still while code runs)
    if ((spin & 255) === 255 && (performance.now() > until || spin > 1 << 20)) break;
  }
  for (;;) {
    Atomics.wait(c, at, seen);
    const now = Atomics.load(c, at);
    if (now !== seen) return now;
  }
}
