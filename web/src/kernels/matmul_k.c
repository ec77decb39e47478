/*
 * Quantized matmuls straight over GGUF blocks as stored: y[t, r] = dot(W[r, :], x[t, :]) for
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights. The weights are used in place (no
 * repacking, no float copy), so the kernel memory holds each tensor at its file size.
 *
 * Math: the same activation split as quantize_x.wat (apr_webkernel.py has the accuracy
 * argument): every 32-column block b of x is scaled by dx = max|x| / 32767 and written as two
 * int16 terms xh, xl (quantize_x of quantize_x.wat), so the weights' integer codes q meet x in
 * exact `i32x4.dot_i16x8_s` sums. Per sub-block (32 columns, or 16 for the 16-column scales of
 * Q2_K, Q3_K and Q6_K), in float32 and in this order:
 *     s    = f32(sum q*xh) + f32(sum q*xl) * 2^-15
 *     acc  = acc + s * (scale * dx)              scale = d * sub-block scale (exact in f32)
 *     macc = macc + min * sum(x over the sub-block)         (types with an offset only)
 *     y    = acc - macc   (K-quants: w = scale * q - min)   or acc + macc (Q4_1, Q5_1: d q + m)
 * WebAssembly has no FMA and this file is built with -ffp-contract=off, so the kernel equals
 * a float32 replay of these steps bit for bit (wasm_tests/test_kquant_kernel.py).
 *
 * The block layouts, their decoders and the codes' widening to int16 are in block_codes.h
 * (shared with matmul_r.c).
 * Build: scripts/build_wasm_kernels.py (zig cc, wasm32 with SIMD128).
 */
#include "block_codes.h"

/* x [T, nb * 32] f32 -> xq [T, nb, 64] int16 (per block 32 xh, then 32 xl) and sc [T, nb, 2]
 * f32 (dx = max|x| / 32767, then sum(x) in column order): x ~ dx * (xh + xl / 32768). */
EXPORT("quantize_x")
void quantize_x(const float* x, int nb, int T, int16_t* xq, float* sc) {
  for (int i = 0; i < nb * T; i++) {
    const float* v = x + 32 * i;
    float amax = 0.0f, sum = 0.0f;
    for (int k = 0; k < 32; k++) {
      float a = v[k] < 0.0f ? -v[k] : v[k];
      amax = a > amax ? a : amax;
      sum = sum + v[k];
    }
    v128_t inv = wasm_f32x4_splat(amax > 0.0f ? 32767.0f / amax : 0.0f);
    v128_t h[8], l[8];
#pragma clang loop unroll(full)
    for (int j = 0; j < 8; j++) {  /* |xh| <= 32767, |xl| <= 16384: the narrowing is exact */
      v128_t xs = wasm_f32x4_mul(wasm_v128_load(v + 4 * j), inv);
      v128_t xh = wasm_f32x4_nearest(xs);
      h[j] = wasm_i32x4_trunc_sat_f32x4(xh);
      l[j] = wasm_i32x4_trunc_sat_f32x4(
          wasm_f32x4_nearest(wasm_f32x4_mul(wasm_f32x4_sub(xs, xh), wasm_f32x4_splat(32768.0f))));
    }
    int16_t* out = xq + 64 * i;
#pragma clang loop unroll(full)
    for (int j = 0; j < 4; j++) {
      wasm_v128_store(out + 8 * j, wasm_i16x8_narrow_i32x4(h[2 * j], h[2 * j + 1]));
      wasm_v128_store(out + 32 + 8 * j, wasm_i16x8_narrow_i32x4(l[2 * j], l[2 * j + 1]));
    }
    sc[2 * i] = amax / 32767.0f;
    sc[2 * i + 1] = sum;
  }
}

/* Four rows' codes c[from..from+count) against xh and xl: s per row (lane), float32:
 * f32(sum q*xh) + f32(sum q*xl) * 2^-15, the integer sums exact. */
INLINE v128_t block_sums(const Block* k, const int16_t* xh, int from, int count) {
  v128_t ih[4], il[4];
#pragma clang loop unroll(full)
  for (int r = 0; r < 4; r++) ih[r] = il[r] = wasm_i32x4_splat(0);
#pragma clang loop unroll(full)
  for (int i = from; i < from + count; i++) {
    v128_t h = wasm_v128_load(xh + 8 * i), l = wasm_v128_load(xh + 32 + 8 * i);
#pragma clang loop unroll(full)
    for (int r = 0; r < 4; r++) {
      ih[r] = wasm_i32x4_add(ih[r], wasm_i32x4_dot_i16x8(k[r].c[i], h));
      il[r] = wasm_i32x4_add(il[r], wasm_i32x4_dot_i16x8(k[r].c[i], l));
    }
  }
  v128_t high = wasm_f32x4_convert_i32x4(reduce4(ih[0], ih[1], ih[2], ih[3]));
  v128_t low = wasm_f32x4_convert_i32x4(reduce4(il[0], il[1], il[2], il[3]));
  return wasm_f32x4_add(high, wasm_f32x4_mul(low, wasm_f32x4_splat(0x1p-15f)));
}

/* One kind's rows [first, last), four at a time (group_rows): `acc` and `macc` are [T]
 * f32x4 scratch, one lane per row. */
INLINE void rows_of(int kind, const uint8_t* w, const int16_t* xq, const float* sc,
                    const float* s16, float* y, v128_t* acc, v128_t* macc, int rows, int nb,
                    int T, int first, int last) {
  int sixteen = sixteen_columns(kind), mins = has_mins(kind);
  int stride = row_bytes(kind, nb);
  Block k[4];
  const uint8_t* row[4];
  int at[4];
  for (int g = 0; g < group_count(first, last); g++) {
    group_rows(first, last, g, at);
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; i++) row[i] = w + (uint32_t)at[i] * (uint32_t)stride;
    for (int t = 0; t < T; t++) acc[t] = macc[t] = wasm_f32x4_splat(0.0f);
    for (int b = 0; b < nb; b++) {
#pragma clang loop unroll(full)
      for (int i = 0; i < 4; i++) {
        decode(kind, row[i], b, &k[i]);
        widen_codes(&k[i]);
      }
      v128_t scale0 = lanes(k, 0, 0);
      v128_t scale1 = sixteen ? lanes(k, 0, 1) : scale0;
      v128_t min0 = mins ? lanes(k, 1, 0) : scale0;
      v128_t min1 = mins && sixteen ? lanes(k, 1, 1) : scale0;
      for (int t = 0; t < T; t++) {
        int at = t * nb + b;
        const int16_t* xh = xq + 64 * at;
        v128_t dx = wasm_f32x4_splat(sc[2 * at]);
        if (sixteen) {
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(block_sums(k, xh, 0, 2), wasm_f32x4_mul(scale0, dx)));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(block_sums(k, xh, 2, 2), wasm_f32x4_mul(scale1, dx)));
          if (mins) {
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min0, wasm_f32x4_splat(s16[2 * at])));
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min1, wasm_f32x4_splat(s16[2 * at + 1])));
          }
        } else {
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(block_sums(k, xh, 0, 4), wasm_f32x4_mul(scale0, dx)));
          if (mins) macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min0, wasm_f32x4_splat(sc[2 * at + 1])));
        }
      }
    }
    store_group(kind, acc, macc, y, rows, T, at);
  }
}

/* Weight `w` (GGUF blocks [rows, cols]) times the split x (xq [T, nb, 64] int16 and
 * sc [T, nb, 2] from quantize_x's quantize_x; s16 [T, 2 nb] from sums16 for Q2_K, else unused)
 * -> y [T, rows], rows [first, last) only (a thread's share); acc, macc: [T] x 16 bytes. */
EXPORT("matmul_k")
void matmul_k(int kind, const uint8_t* w, const int16_t* xq, const float* sc, const float* s16,
              float* y, v128_t* acc, v128_t* macc, int rows, int nb, int T, int first, int last) {
#define ROWS(K) rows_of(K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last)
  FOR_EACH_KIND(kind, ROWS)  /* one specialized loop per kind */
#undef ROWS
}

/* Sums of x [T, 16 * n16] over every 16 columns, in column order, float32 -> out [T * n16]. */
EXPORT("sums16")
void sums16(const float* x, int n16, int T, float* out) {
  for (int i = 0; i < n16 * T; i++) {
    float s = 0.0f;
    for (int k = 0; k < 16; k++) s = s + x[16 * i + k];
    out[i] = s;
  }
}

/* Bytes of a `rows` x (32 nb) weight of `kind` (0 for an unknown kind). */
EXPORT("weight_bytes")
int weight_bytes(int kind, int rows, int nb) {
  if (kind < Q4_1 || kind > Q4_0) return 0;
  return rows * row_bytes(kind, nb);
}
