/*
 * The relaxed-SIMD twin of matmul_k.c: the same matmuls straight over GGUF blocks as stored
 * (every type of block_codes.h, four rows at a time, weights read in place), for browsers
 * with WebAssembly relaxed SIMD (simd_kernel.js loads this module only where it validates,
 * and uses matmul_k.c elsewhere or when the page asks for the exact kernels).
 *
 * Activations: every 32-column block of x is rounded to one int16 code per column, held as
 * two int8 terms, c = 256 q1 + q2 (quantize_x8): dx = max|x| / 127, q1 = nearest(x * (127 /
 * max|x|)) in -127..127 (llama.cpp's Q8_0 rounding of activations), q2 = nearest of its
 * residual times 256, at most 127 (-128..127), so x ~ (dx / 256) c, off by at most
 * dx / 512 = max|x| / 65024 per column (dx / 256 where q1's rounding was an exact tie and
 * q2 = 128 is held as 127). q1 alone (llama.cpp's rounding, this kernel's first
 * version) flips SmolLM2's near-tie first token of "What is the capital of France?" (a 0.08
 * logit gap) from "The capital of France is Paris." to "L'Étoile, la Marseillaise, ..."; the
 * residual term keeps `apr run`'s answer.
 * Dots: a block's code bytes u (0..63 for every type but Q8_0: a valid 7-bit operand) meet q1
 * and q2 in `i16x8.relaxed_dot_i8x16_i7x16_s`, one instruction per 16 columns and term (on
 * x86 one pmaddubsw, where the i32 form `i32x4.relaxed_dot_i8x16_i7x16_add_s` is three
 * without AVX-VNNI: the i16 form measured 0.8x its time per SmolLM2 layer in Chromium at
 * --isa avx2), where matmul_k.c widens codes to int16 and takes four int16 dots; for such
 * operands every engine computes the exact dot (its only freedom is how it reads a second
 * operand with the top bit set, and whether a pair sum saturates: here |u q| <= 63 * 128, so
 * a pair stays <= 16128 and the two halves of a 32-column block <= 32256, all exact in
 * int16); the int16 sums then widen exactly to int32 (`i32x4.dot_i16x8_s` by 256 for q1,
 * `extadd_pairwise` for q2). Q8_0's signed bytes
 * are widened to int16 and meet c in `i32x4.dot_i16x8_s` (four dots, not the eight relaxed
 * ones that its sign would take). Per sub-block (32 columns, or 16 for Q2_K, Q3_K and Q6_K),
 * with d = dx / 256, in float32 and in this order:
 *     s    = f32(256 sum u*q1 + sum u*q2 - off * sum c)    (Q8_0: f32(sum w*c))
 *     acc  = acc + s * (scale * d)
 *     macc = macc + min * (f32(sum c over the sub-block) * d)   (types with an offset only)
 *     y    = acc - macc (K-quants) or acc + macc (Q4_1, Q5_1)
 * The mins meet the same rounded x as the codes (as llama.cpp's Q8_1 sums do): with the exact
 * sum of x instead, the rounding errors of the unsigned codes' common part (q = 0..15 around
 * a min near -8 d) no longer cancel. The integer sums are exact (|sum| < 2^28; the float32
 * conversion rounds them, as the replay does), so the kernel equals a float32 replay of these
 * steps bit for bit (wasm_tests/test_kquant_kernel.py); its error against the float product
 * is x's rounding to c (at most d / 2 per column, d at ties) plus float32 rounding.
 * Build: scripts/build_wasm_kernels.py (zig cc, wasm32 with SIMD128 and relaxed SIMD).
 */
#include "block_codes.h"

/* Bytes of one 32-column block's activation codes: q1 [32] and q2 [32] int8, then c [32]
 * int16 (simd_kernel.js sizes its scratch for this, plus the sums). */
#define CODE_BYTES 128

/* x [T, nb * 32] f32 -> x8 [T, nb, CODE_BYTES] (q1, q2, c per block) followed by isum
 * [T, nb, 2] int32 (the sums of c over columns 0..15 and 16..31), and sc [T, nb, 2] f32:
 * d = dx / 256, then f32(sum c) * d. */
EXPORT("quantize_x8")
void quantize_x8(const float* x, int nb, int T, int8_t* x8, float* sc) {
  int32_t* isum = (int32_t*)(x8 + CODE_BYTES * nb * T);
  for (int i = 0; i < nb * T; i++) {
    const float* v = x + 32 * i;
    float amax = 0.0f;
    for (int k = 0; k < 32; k++) {
      float a = v[k] < 0.0f ? -v[k] : v[k];
      amax = a > amax ? a : amax;
    }
    v128_t inv = wasm_f32x4_splat(amax > 0.0f ? 127.0f / amax : 0.0f);
    v128_t q1[8], q2[8], c[8];
#pragma clang loop unroll(full)
    for (int j = 0; j < 8; j++) {  /* nearest, then saturating: NaN becomes 0, never a trap */
      v128_t xs = wasm_f32x4_mul(wasm_v128_load(v + 4 * j), inv);
      v128_t high = wasm_f32x4_nearest(xs);   /* xs - high is exact, |.| <= 1/2 */
      q1[j] = wasm_i32x4_trunc_sat_f32x4(high);
      q2[j] = wasm_i32x4_min(wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(
          wasm_f32x4_mul(wasm_f32x4_sub(xs, high), wasm_f32x4_splat(256.0f)))), wasm_i32x4_splat(127));
      c[j] = wasm_i32x4_add(wasm_i32x4_shl(q1[j], 8), q2[j]);
    }
    int8_t* out = x8 + CODE_BYTES * i;
#pragma clang loop unroll(full)
    for (int h = 0; h < 2; h++) {  /* the narrowings are exact: every value fits */
      wasm_v128_store(out + 16 * h, wasm_i8x16_narrow_i16x8(
          wasm_i16x8_narrow_i32x4(q1[4 * h], q1[4 * h + 1]), wasm_i16x8_narrow_i32x4(q1[4 * h + 2], q1[4 * h + 3])));
      wasm_v128_store(out + 32 + 16 * h, wasm_i8x16_narrow_i16x8(
          wasm_i16x8_narrow_i32x4(q2[4 * h], q2[4 * h + 1]), wasm_i16x8_narrow_i32x4(q2[4 * h + 2], q2[4 * h + 3])));
      wasm_v128_store(out + 64 + 32 * h, wasm_i16x8_narrow_i32x4(c[4 * h], c[4 * h + 1]));
      wasm_v128_store(out + 80 + 32 * h, wasm_i16x8_narrow_i32x4(c[4 * h + 2], c[4 * h + 3]));
    }
    v128_t s0 = wasm_i32x4_add(wasm_i32x4_add(c[0], c[1]), wasm_i32x4_add(c[2], c[3]));
    v128_t s1 = wasm_i32x4_add(wasm_i32x4_add(c[4], c[5]), wasm_i32x4_add(c[6], c[7]));
    isum[2 * i] = wasm_i32x4_extract_lane(s0, 0) + wasm_i32x4_extract_lane(s0, 1) +
                  wasm_i32x4_extract_lane(s0, 2) + wasm_i32x4_extract_lane(s0, 3);
    isum[2 * i + 1] = wasm_i32x4_extract_lane(s1, 0) + wasm_i32x4_extract_lane(s1, 1) +
                      wasm_i32x4_extract_lane(s1, 2) + wasm_i32x4_extract_lane(s1, 3);
    sc[2 * i] = (amax / 127.0f) * 0x1p-8f;
    sc[2 * i + 1] = (float)(isum[2 * i] + isum[2 * i + 1]) * sc[2 * i];
  }
}

#define DOT(a, b) wasm_i16x8_relaxed_dot_i8x16_i7x16(a, b)

/* One term's codes (a: columns 0..15, 16..31) against a row's code bytes u over columns
 * 16 h .. 16 h + 15 (h = 0, 1) or all 32 (h = 2): i16x8 partial sums (exact: see above). */
INLINE v128_t term_dot(const v128_t* a, const v128_t* u, int h) {
  if (h == 0) return DOT(a[0], u[0]);
  if (h == 1) return DOT(a[1], u[1]);
  return wasm_i16x8_add(DOT(a[0], u[0]), DOT(a[1], u[1]));
}

/* Four rows' exact integer sums over columns 16 h .. 16 h + 15 (h = 0, 1) or all 32 (h = 2)
 * against the block's activation codes `q` (q1 columns 0..15, 16..31, then q2 the same) and
 * `c` (int16, columns 0..31 in four vectors): lane r is row r's 256 sum u q1 + sum u q2 less
 * off * `isum` (Q8_0: sum w c, its codes widened to int16). */
INLINE v128_t block_sums(int kind, const Block* k, const v128_t q[4], const v128_t c[4], int h,
                         int32_t isum) {
  v128_t d[4];
#pragma clang loop unroll(full)
  for (int r = 0; r < 4; r++) {
    if (kind == Q8_0) {
      d[r] = wasm_i32x4_add(
          wasm_i32x4_add(wasm_i32x4_dot_i16x8(k[r].c[0], c[0]), wasm_i32x4_dot_i16x8(k[r].c[1], c[1])),
          wasm_i32x4_add(wasm_i32x4_dot_i16x8(k[r].c[2], c[2]), wasm_i32x4_dot_i16x8(k[r].c[3], c[3])));
    } else {
      d[r] = wasm_i32x4_add(wasm_i32x4_dot_i16x8(term_dot(q, k[r].u, h), wasm_i16x8_splat(256)),
                            wasm_i32x4_extadd_pairwise_i16x8(term_dot(q + 2, k[r].u, h)));
    }
  }
  v128_t s = reduce4(d[0], d[1], d[2], d[3]);
  return k[0].off ? wasm_i32x4_sub(s, wasm_i32x4_splat(k[0].off * isum)) : s;
}

/* halves() of the low (*lo) and high (*hi) 16 bits of every lane of `v`, bit for bit: the
 * same steps on both halves at once (a row's d and dmin, adjacent in every type with mins,
 * come in one 32-bit read); lanes with an infinity or NaN (exponent 31) take halves(). */
INLINE void halves2(v128_t v, v128_t* lo, v128_t* hi) {
  v128_t special = wasm_i16x8_eq(wasm_v128_and(v, wasm_i16x8_splat(0x7c00)), wasm_i16x8_splat(0x7c00));
  if (wasm_v128_any_true(special)) {
    *lo = halves(wasm_v128_and(v, wasm_i32x4_splat(0xffff)));
    *hi = halves(wasm_u32x4_shr(v, 16));
    return;
  }
  v128_t mag = wasm_v128_and(v, wasm_i16x8_splat(0x7fff));
  v128_t sign = wasm_v128_and(v, wasm_i16x8_splat((int16_t)0x8000));
  v128_t low = wasm_u32x4_shr(wasm_i32x4_shl(mag, 16), 3);                       /* << 13 */
  v128_t high = wasm_v128_and(wasm_u32x4_shr(mag, 3), wasm_i32x4_splat(0x0fffe000));  /* >> 16 << 13 */
  *lo = wasm_v128_or(wasm_f32x4_mul(low, wasm_f32x4_splat(0x1p112f)), wasm_i32x4_shl(sign, 16));
  *hi = wasm_v128_or(wasm_f32x4_mul(high, wasm_f32x4_splat(0x1p112f)),
                     wasm_v128_and(sign, wasm_i32x4_splat((int32_t)0x80000000)));
}

/* lanes(k, 0, h) and lanes(k, 1, h) of a type with mins: d and dmin widened together. */
INLINE void scale_min_lanes(const Block* k, int h, v128_t* scale, v128_t* min) {
  v128_t d, dmin;
  halves2(wasm_i32x4_make(k[0].d | k[0].dmin << 16, k[1].d | k[1].dmin << 16,
                          k[2].d | k[2].dmin << 16, k[3].d | k[3].dmin << 16), &d, &dmin);
  *scale = wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(wasm_i32x4_make(k[0].sc[h], k[1].sc[h], k[2].sc[h], k[3].sc[h])));
  *min = wasm_f32x4_mul(dmin, wasm_f32x4_convert_i32x4(wasm_i32x4_make(k[0].mn[h], k[1].mn[h], k[2].mn[h], k[3].mn[h])));
}

/* One kind's rows [first, last), four at a time (group_rows): `acc` and `macc` are [T]
 * f32x4 scratch, one lane per row. */
INLINE void rows_of(int kind, const uint8_t* w, const int8_t* x8, const float* sc,
                    const float* s16, float* y, v128_t* acc, v128_t* macc, int rows, int nb,
                    int T, int first, int last) {
  int sixteen = sixteen_columns(kind), mins = has_mins(kind);
  int stride = row_bytes(kind, nb);
  const int32_t* isum = (const int32_t*)(x8 + CODE_BYTES * nb * T);
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
        if (kind == Q8_0) widen_codes(&k[i]);
      }
      v128_t scale0, scale1, min0, min1;
      if (mins) {
        scale_min_lanes(k, 0, &scale0, &min0);
        if (sixteen) scale_min_lanes(k, 1, &scale1, &min1);
        else scale1 = scale0, min1 = scale0;
      } else {
        scale0 = lanes(k, 0, 0);
        scale1 = sixteen ? lanes(k, 0, 1) : scale0;
        min0 = min1 = scale0;
      }
      for (int t = 0; t < T; t++) {
        int at = t * nb + b;
        const int8_t* codes = x8 + CODE_BYTES * at;
        v128_t q[4], c[4];
#pragma clang loop unroll(full)
        for (int j = 0; j < 4; j++) {
          if (kind == Q8_0) c[j] = wasm_v128_load(codes + 64 + 16 * j);
          else q[j] = wasm_v128_load(codes + 16 * j);
        }
        v128_t d = wasm_f32x4_splat(sc[2 * at]);
        if (sixteen) {
          v128_t s0 = wasm_f32x4_convert_i32x4(block_sums(kind, k, q, c, 0, isum[2 * at]));
          v128_t s1 = wasm_f32x4_convert_i32x4(block_sums(kind, k, q, c, 1, isum[2 * at + 1]));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s0, wasm_f32x4_mul(scale0, d)));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s1, wasm_f32x4_mul(scale1, d)));
          if (mins) {
            float sum0 = (float)isum[2 * at] * sc[2 * at], sum1 = (float)isum[2 * at + 1] * sc[2 * at];
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min0, wasm_f32x4_splat(sum0)));
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min1, wasm_f32x4_splat(sum1)));
          }
        } else {
          int32_t both = isum[2 * at] + isum[2 * at + 1];
          v128_t s = wasm_f32x4_convert_i32x4(block_sums(kind, k, q, c, 2, both));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s, wasm_f32x4_mul(scale0, d)));
          if (mins) macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min0, wasm_f32x4_splat(sc[2 * at + 1])));
        }
      }
    }
    store_group(kind, acc, macc, y, rows, T, at);
  }
}

/* Weight `w` (GGUF blocks [rows, cols]) times the quantized x (x8 and isum from quantize_x8
 * at `xq`, sc [T, nb, 2]; s16 unused)
 * -> y [T, rows], rows [first, last) only (a thread's share); acc, macc: [T] x 16 bytes.
 * The same arguments as matmul_k, so the shell's threads run either. */
EXPORT("matmul_r")
void matmul_r(int kind, const uint8_t* w, const int8_t* xq, const float* sc, const float* s16,
              float* y, v128_t* acc, v128_t* macc, int rows, int nb, int T, int first, int last) {
#define ROWS(K) rows_of(K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last)
  FOR_EACH_KIND(kind, ROWS)  /* one specialized loop per kind */
#undef ROWS
}
