/*
 * A float32 matrix product register-tiled over "panels": a weight W [rows, cols] is stored
 * as ceil(rows / 8) panels, each [cols][8] (for every column k the 8 rows' values side by
 * side; rows past `rows` zero), so one 4-token tile keeps 4 x 8 outputs in eight f32x4
 * accumulators and each weight load serves four tokens (matmul_f32.wat reads every weight
 * once per token). Each output is a plain float32 sum in column order,
 *     y[t, r] = (...((0 + x[t,0] w[r,0]) + x[t,1] w[r,1]) + ...) + x[t,cols-1] w[r,cols-1],
 * whatever the tiling or the thread split, so a float32 numpy replay equals it bit for bit.
 * Included by attend_f32.c.
 */
#ifndef PANEL_GEMM_H
#define PANEL_GEMM_H
#include <wasm_simd128.h>

#define PANEL 8       /* weight rows per panel */
#define TILE 4        /* tokens per tile */
/* Panels a group holds (their bytes stay in L2 while a thread's tiles pass over them). */
#define GROUP_BYTES (256 * 1024)
#define INLINE static inline __attribute__((always_inline))

INLINE int panels_of(int rows) { return (rows + PANEL - 1) / PANEL; }
INLINE int min_int(int a, int b) { return a < b ? a : b; }

/* The first `n` (<= 8) of the eight lanes a | b to y (no stack: threads share page 0's). */
INLINE void store8(float* y, v128_t a, v128_t b, int n) {
  if (n == PANEL) {
    wasm_v128_store(y, a);
    wasm_v128_store(y + 4, b);
    return;
  }
  if (n > 0) y[0] = wasm_f32x4_extract_lane(a, 0);
  if (n > 1) y[1] = wasm_f32x4_extract_lane(a, 1);
  if (n > 2) y[2] = wasm_f32x4_extract_lane(a, 2);
  if (n > 3) y[3] = wasm_f32x4_extract_lane(a, 3);
  if (n > 4) y[4] = wasm_f32x4_extract_lane(b, 0);
  if (n > 5) y[5] = wasm_f32x4_extract_lane(b, 1);
  if (n > 6) y[6] = wasm_f32x4_extract_lane(b, 2);
}

#define MAC(a, b, s) a = wasm_f32x4_add(a, wasm_f32x4_mul(s, wa)); \
                     b = wasm_f32x4_add(b, wasm_f32x4_mul(s, wb))

/* y[t, 0..n) for four tokens t of x (rows `xs` floats apart) against one panel `w`. */
INLINE void tile4(const float* x, int xs, const float* w, int cols, float* y, int ys, int n) {
  v128_t a0 = wasm_f32x4_splat(0.0f), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
  const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
  for (int k = 0; k < cols; k++, w += PANEL) {
    v128_t wa = wasm_v128_load(w), wb = wasm_v128_load(w + 4);
    MAC(a0, b0, wasm_v128_load32_splat(x0 + k));
    MAC(a1, b1, wasm_v128_load32_splat(x1 + k));
    MAC(a2, b2, wasm_v128_load32_splat(x2 + k));
    MAC(a3, b3, wasm_v128_load32_splat(x3 + k));
  }
  store8(y, a0, b0, n);
  store8(y + ys, a1, b1, n);
  store8(y + 2 * ys, a2, b2, n);
  store8(y + 3 * ys, a3, b3, n);
}

/* The same for one token. */
INLINE void tile1(const float* x, const float* w, int cols, float* y, int n) {
  v128_t a0 = wasm_f32x4_splat(0.0f), b0 = a0;
  for (int k = 0; k < cols; k++, w += PANEL) {
    v128_t wa = wasm_v128_load(w), wb = wasm_v128_load(w + 4);
    MAC(a0, b0, wasm_v128_load32_splat(x + k));
  }
  store8(y, a0, b0, n);
}

/* `tokens` (<= TILE) rows of x against one panel. */
INLINE void tile(int tokens, const float* x, int xs, const float* w, int cols, float* y, int ys,
                 int n) {
  if (tokens == TILE) {
    tile4(x, xs, w, cols, y, ys, n);
    return;
  }
  for (int t = 0; t < tokens; t++) tile1(x + t * xs, w, cols, y + t * ys, n);
}

/* y [t1 - t0 tokens, rows] (rows `rows` apart) = x [.., cols] W^T for panels [p0, p1) of W,
 * a group of panels at a time. */
INLINE void panel_product(const float* wp, const float* x, float* y, int rows, int cols,
                          int t0, int t1, int p0, int p1) {
  int group = GROUP_BYTES / (cols * PANEL * 4);
  if (group < 1) group = 1;
  for (int g = p0; g < p1; g += group) {
    int end = min_int(g + group, p1);
    for (int t = t0; t < t1; t += TILE) {
      int tokens = min_int(TILE, t1 - t);
      for (int p = g; p < end; p++) {
        tile(tokens, x + t * cols, cols, wp + p * cols * PANEL, cols, y + t * rows + p * PANEL,
             rows, min_int(PANEL, rows - p * PANEL));
      }
    }
  }
}

#endif
