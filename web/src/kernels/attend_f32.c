/*
 * The speech page's float32 kernels (simd_kernel.js; apr_webspeech.py plugs them into
 * Whisper's seams): the register-tiled product over packed weights (panel_gemm.h), one
 * head of the encoder's attention, the decoder's cross-attention and the exact-erf GELU
 * (exp_f32.h), and the log-mel's float64 STFT product (panel_f64.h). Every exported job takes (..., index, threads) last and computes thread
 * `index`'s share of it, so the shell's helper threads run the same call side by side over
 * the shared memory. Every result is a fixed sequence of float32 operations whatever the
 * thread split (wasm_tests/test_attend_kernel.py replays them in numpy bit for bit).
 * No stack or static data: every array is passed by address.
 * Build: scripts/build_wasm_kernels.py (zig cc, wasm32 with SIMD128).
 */
#include "exp_f32.h"
#include "panel_f64.h"
#include "panel_gemm.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* Thread `index`'s share [first, last) of `n` items. */
INLINE int share(int n, int index, int threads) { return (int)((long long)n * index / threads); }

/* W [rows, cols] -> panels (panel_gemm.h), rows past `rows` zero. */
EXPORT("pack_rows")
void pack_rows(const float* w, int rows, int cols, float* out) {
  for (int p = 0; p < panels_of(rows); p++) {
    for (int k = 0; k < cols; k++) {
      for (int j = 0; j < PANEL; j++) {
        int r = p * PANEL + j;
        *out++ = r < rows ? w[r * cols + k] : 0.0f;
      }
    }
  }
}

/* v [S, dh] -> panels of v^T [dh, Sp] (keys past S zero): the weight of probs [.., Sp] v. */
EXPORT("pack_cols")
void pack_cols(const float* v, int S, int dh, int Sp, float* out) {
  for (int p = 0; p < panels_of(dh); p++) {
    for (int j = 0; j < Sp; j++) {
      for (int c = p * PANEL; c < p * PANEL + PANEL; c++) {
        *out++ = j < S && c < dh ? v[j * dh + c] : 0.0f;
      }
    }
  }
}

/* y [T, rows] = x [T, cols] W^T, W as panels at `wp`: thread `index` computes its tokens, or
 * its panels when there are fewer than two tiles of tokens a thread. */
EXPORT("gemm")
void gemm(const float* wp, const float* x, float* y, int rows, int cols, int T, int index,
          int threads) {
  int panels = panels_of(rows);
  if (T >= 2 * TILE * threads) {
    panel_product(wp, x, y, rows, cols, share(T, index, threads), share(T, index + 1, threads),
                  0, panels);
  } else {
    panel_product(wp, x, y, rows, cols, 0, T, share(panels, index, threads),
                  share(panels, index + 1, threads));
  }
}

/* s[0..Sp) <- exp(s - max(s[0..S))) with keys from S on zero; returns their float32 sum,
 * four lanes in key order then (l0 + l1) + (l2 + l3). Sp is a multiple of 4. */
INLINE float softmax_row(float* s, int S, int Sp) {
  v128_t m = wasm_f32x4_splat(s[0]);
  int j = 0;
  for (; j + 4 <= S; j += 4) m = wasm_f32x4_pmax(m, wasm_v128_load(s + j));
  m = wasm_f32x4_pmax(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
  m = wasm_f32x4_pmax(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
  float top = wasm_f32x4_extract_lane(m, 0);
  for (; j < S; j++) top = s[j] > top ? s[j] : top;
  m = wasm_f32x4_splat(top);
  v128_t sum = wasm_f32x4_splat(0.0f), limit = wasm_i32x4_splat(S);
  v128_t lane = wasm_i32x4_make(0, 1, 2, 3);
  for (int j = 0; j < Sp; j += 4) {
    v128_t e = exp_f32x4(wasm_f32x4_sub(wasm_v128_load(s + j), m));
    e = wasm_v128_and(e, wasm_i32x4_lt(wasm_i32x4_add(lane, wasm_i32x4_splat(j)), limit));
    wasm_v128_store(s + j, e);
    sum = wasm_f32x4_add(sum, e);
  }
  return (wasm_f32x4_extract_lane(sum, 0) + wasm_f32x4_extract_lane(sum, 1))
         + (wasm_f32x4_extract_lane(sum, 2) + wasm_f32x4_extract_lane(sum, 3));
}

/* row[0..n) /= total */
INLINE void divide(float* row, int n, float total) {
  for (int c = 0; c < n; c++) row[c] = row[c] / total;
}

/* Query rows a block of attend_rows: each key and value panel is read once a block, not
 * once a 4-row tile, and a block's scores (32 x 1504 floats) stay in L2. On the speech
 * page (Q8_0, 2 threads, load 5-7) a transcription took 35-37 s against 48 s with tiles. */
#define ATTEND_ROWS 32

/* Floats of attend_rows' scratch a thread: a block's scores, then their sums. */
EXPORT("attend_scratch")
int attend_scratch(int Sp) { return ATTEND_ROWS * Sp + ATTEND_ROWS; }

/*
 * One head of the encoder's attention, query rows share(T) of thread `index`: q [T, dh]
 * (already scaled), kp = pack_rows(k [S, dh]) (Sp / 8 panels), vp = pack_cols(v [S, dh]);
 * out [T, dh]; `scratch`: attend_scratch(Sp) floats a thread. Per block of query rows:
 * scores = q k^T (panel products over dh), softmax_row, out = (probs v) / sum.
 */
EXPORT("attend_rows")
void attend_rows(const float* q, const float* kp, const float* vp, float* out, float* scratch,
                 int T, int S, int Sp, int dh, int index, int threads) {
  float* s = scratch + index * attend_scratch(Sp);
  float* sums = s + ATTEND_ROWS * Sp;
  int last = share(T, index + 1, threads);
  for (int t = share(T, index, threads); t < last; t += ATTEND_ROWS) {
    int n = min_int(ATTEND_ROWS, last - t);
    panel_product(kp, q + t * dh, s, Sp, dh, 0, n, 0, Sp / PANEL);            /* [n, Sp] */
    for (int i = 0; i < n; i++) sums[i] = softmax_row(s + i * Sp, S, Sp);
    panel_product(vp, s, out + t * dh, dh, Sp, 0, n, 0, panels_of(dh));      /* [n, dh] */
    for (int i = 0; i < n; i++) divide(out + (t + i) * dh, dh, sums[i]);
  }
}

#define PV(a, c) a = wasm_f32x4_add(a, wasm_f32x4_mul(p, wasm_v128_load(row + c)))

/* out[0..dh) = sum over keys j of e[j] v[j, :] (v [S, dh], dh a multiple of 4), in key
 * order, 32 columns (eight accumulators) a pass. */
INLINE void weighted_rows(const float* e, const float* v, int S, int dh, float* out) {
  int c = 0;
  for (; c + 32 <= dh; c += 32) {
    v128_t a0 = wasm_f32x4_splat(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0;
    const float* row = v + c;
    for (int j = 0; j < S; j++, row += dh) {
      v128_t p = wasm_v128_load32_splat(e + j);
      PV(a0, 0); PV(a1, 4); PV(a2, 8); PV(a3, 12); PV(a4, 16); PV(a5, 20); PV(a6, 24); PV(a7, 28);
    }
    wasm_v128_store(out + c, a0); wasm_v128_store(out + c + 4, a1);
    wasm_v128_store(out + c + 8, a2); wasm_v128_store(out + c + 12, a3);
    wasm_v128_store(out + c + 16, a4); wasm_v128_store(out + c + 20, a5);
    wasm_v128_store(out + c + 24, a6); wasm_v128_store(out + c + 28, a7);
  }
  for (; c < dh; c += 4) {
    v128_t a0 = wasm_f32x4_splat(0.0f);
    const float* row = v + c;
    for (int j = 0; j < S; j++, row += dh) {
      v128_t p = wasm_v128_load32_splat(e + j);
      PV(a0, 0);
    }
    wasm_v128_store(out + c, a0);
  }
}

/*
 * Whisper's cross-attention for thread `index`'s share of the R x H (query row, head)
 * pairs: q [R, H, dh] over one window's kt = K^T [H, dh, Sp] (keys past S zero) and
 * v [H, S, dh] -> out [R, H * dh]; `scale_bits`: the float32 scale's bits; `scratch`: Sp
 * floats a thread. Per pair: qs = q * scale, scores[j] = sum over i of qs[i] kt[i, j] in
 * i order, softmax_row, out = (probs v) / sum.
 */
EXPORT("cross_attend")
void cross_attend(const float* q, const float* kt, const float* v, float* out, float* scratch,
                  int R, int H, int dh, int S, int Sp, int scale_bits, int index, int threads) {
  union { int i; float f; } bits = {scale_bits};
  v128_t scale = wasm_f32x4_splat(bits.f);
  float* s = scratch + index * Sp;
  int last = share(R * H, index + 1, threads);
  for (int item = share(R * H, index, threads); item < last; item++) {
    int h = item % H;
    const float* qi = q + item * dh;       /* [R, H, dh]: pair (r, h) is row item */
    const float* k = kt + h * dh * Sp;
    for (int j = 0; j < Sp; j += 4) wasm_v128_store(s + j, wasm_f32x4_splat(0.0f));
    for (int i = 0; i < dh; i++, k += Sp) {
      v128_t qs = wasm_f32x4_mul(wasm_v128_load32_splat(qi + i), scale);
      for (int j = 0; j < Sp; j += 4) {
        wasm_v128_store(s + j, wasm_f32x4_add(wasm_v128_load(s + j),
                                              wasm_f32x4_mul(qs, wasm_v128_load(k + j))));
      }
    }
    float total = softmax_row(s, S, Sp);
    float* o = out + item * dh;
    weighted_rows(s, v + h * S * dh, S, dh, o);
    divide(o, dh, total);
  }
}

/* x[i] = gelu(x[i]) (exp_f32.h) for thread `index`'s share of n elements (n a multiple of
 * 4). */
EXPORT("gelu_erf")
void gelu_erf(float* x, int n, int index, int threads) {
  int quads = n / 4;
  int last = 4 * share(quads, index + 1, threads);
  for (int i = 4 * share(quads, index, threads); i < last; i += 4) {
    wasm_v128_store(x + i, gelu_f32x4(wasm_v128_load(x + i)));
  }
}

/* b [K, N] (float64, row-major) -> panels of b^T [N, K] for gemm_f64 (columns past N zero). */
EXPORT("pack_cols_f64")
void pack_cols_f64(const double* b, int K, int N, double* out) {
  for (int p = 0; p < (N + PANEL64 - 1) / PANEL64; p++) {
    for (int k = 0; k < K; k++) {
      for (int j = p * PANEL64; j < p * PANEL64 + PANEL64; j++) *out++ = j < N ? b[k * N + j] : 0.0;
    }
  }
}

/* y [T, rows] (float64) = x W^T for float32 rows of x `xs` floats apart and W as float64
 * panels (pack_cols_f64): thread `index`'s tokens, 4 at a time. */
EXPORT("gemm_f64")
void gemm_f64(const double* wp, const float* x, int xs, double* y, int rows, int cols, int T,
              int index, int threads) {
  int last = share(T, index + 1, threads);
  int panels = (rows + PANEL64 - 1) / PANEL64;
  for (int t = share(T, index, threads); t < last; t += 4) {
    for (int p = 0; p < panels; p++) {
      tile_f64(min_int(4, last - t), x + t * xs, xs, wp + p * cols * PANEL64, cols,
               y + t * rows + p * PANEL64, rows, min_int(PANEL64, rows - p * PANEL64));
    }
  }
}
