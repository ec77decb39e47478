/*
 * The float64 twin of panel_gemm.h's product for the log-mel's STFT (frames times the
 * windowed DFT basis): W [rows, cols] as ceil(rows / 4) panels [cols][4] of doubles (rows
 * past `rows` zero), 4 tokens x 4 rows a tile in eight f64x2 accumulators; x is float32
 * (audio samples, widened exactly) with rows `xs` floats apart (overlapping STFT frames read
 * in place). Each output is a float64 sum in column order from 0, the order numpy's own
 * matmul loop (no BLAS: Pyodide) sums in, so the page's spectrum is what numpy gave it.
 * Included by attend_f32.c.
 */
#ifndef PANEL_F64_H
#define PANEL_F64_H
#include <wasm_simd128.h>

#define PANEL64 4
#define INLINE static inline __attribute__((always_inline))

#define MAC64(a, b, s) a = wasm_f64x2_add(a, wasm_f64x2_mul(s, wa)); \
                       b = wasm_f64x2_add(b, wasm_f64x2_mul(s, wb))
#define SPLAT64(p) wasm_f64x2_splat((double)*(p))

/* The first `n` (<= 4) of the four lanes a | b to y. */
INLINE void store4_f64(double* y, v128_t a, v128_t b, int n) {
  if (n == PANEL64) {
    wasm_v128_store(y, a);
    wasm_v128_store(y + 2, b);
    return;
  }
  if (n > 0) y[0] = wasm_f64x2_extract_lane(a, 0);
  if (n > 1) y[1] = wasm_f64x2_extract_lane(a, 1);
  if (n > 2) y[2] = wasm_f64x2_extract_lane(b, 0);
}

/* y[t, 0..n) for `tokens` (<= 4) rows of x against one panel `w`. */
INLINE void tile_f64(int tokens, const float* x, int xs, const double* w, int cols, double* y,
                     int ys, int n) {
  if (tokens == 4) {
    v128_t a0 = wasm_f64x2_splat(0.0), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    for (int k = 0; k < cols; k++, w += PANEL64) {
      v128_t wa = wasm_v128_load(w), wb = wasm_v128_load(w + 2);
      MAC64(a0, b0, SPLAT64(x0 + k));
      MAC64(a1, b1, SPLAT64(x1 + k));
      MAC64(a2, b2, SPLAT64(x2 + k));
      MAC64(a3, b3, SPLAT64(x3 + k));
    }
    store4_f64(y, a0, b0, n);
    store4_f64(y + ys, a1, b1, n);
    store4_f64(y + 2 * ys, a2, b2, n);
    store4_f64(y + 3 * ys, a3, b3, n);
    return;
  }
  for (int t = 0; t < tokens; t++, x += xs, y += ys) {
    v128_t a0 = wasm_f64x2_splat(0.0), b0 = a0;
    const double* p = w;
    for (int k = 0; k < cols; k++, p += PANEL64) {
      v128_t wa = wasm_v128_load(p), wb = wasm_v128_load(p + 2);
      MAC64(a0, b0, SPLAT64(x + k));
    }
    store4_f64(y, a0, b0, n);
  }
}

#endif
