/*
 * The relaxed-SIMD twin of matmul_k.c: the same matmuls straight over GGUF blocks as stored
 * (every type of block_codes.h, four rows at a time, weights read in place), for browsers
 * with WebAssembly relaxed SIMD (simd_kernel.js loads this module only where it validates,
 * and uses matmul_k.c elsewhere or when the page asks for the exact kernels).
 *
 * Math: every 32-column block of x is quantized to int8 as llama.cpp quantizes activations
 * for its own integer dots (Q8_0): dx = max|x| / 127, qx = nearest(x * (127 / max|x|)) in
 * -127..127 (quantize_x8), with the integer sum of each 16-column half. A block's code bytes u (0..63 for every type but Q8_0: a
 * valid 7-bit operand) meet qx in `i32x4.relaxed_dot_i8x16_i7x16_add_s`: one instruction per
 * 16 columns, where matmul_k.c widens codes to int16 and takes two int16 dots. For such
 * operands every engine computes the exact dot (its only freedom is how it reads a second
 * operand with the top bit set; on x86 a pmaddubsw, whose pair sums stay below 2^15 here).
 * Q8_0's signed bytes w are split as w = (w & 127) - 128 (w < 0). Per sub-block (32 columns,
 * or 16 for Q2_K, Q3_K and Q6_K), in float32 and in this order:
 *     s    = f32(sum u*qx - off * sum qx)      (Q8_0: sum (w & 127) qx - 128 sum (w < 0) qx)
 *     acc  = acc + s * (scale * dx)
 *     macc = macc + min * (f32(sum qx over the sub-block) * dx)   (types with an offset only)
 *     y    = acc - macc (K-quants) or acc + macc (Q4_1, Q5_1)
 * The mins meet the same rounded x as the codes (as llama.cpp's Q8_1 sums do): with the exact
 * sum of x instead, the rounding errors of the unsigned codes' common part (q = 0..15 around
 * a min near -8 d) no longer cancel, which moved SmolLM2's logits 20x further.
 * The integer sums are exact, so the kernel equals a float32 replay of these steps bit for
 * bit (wasm_tests/test_kquant_kernel.py); its error against the float product is x's
 * rounding to qx (at most dx / 2 per column: llama.cpp's own) plus float32 rounding.
 * Build: scripts/build_wasm_kernels.py (zig cc, wasm32 with SIMD128 and relaxed SIMD).
 */
#include "block_codes.h"

/* x [T, nb * 32] f32 -> x8 [T, nb, 32] int8 followed by isum [T, nb, 2] int32 (the sums of
 * qx over columns 0..15 and 16..31), and sc [T, nb, 2] f32: dx, then f32(sum qx) * dx. */
EXPORT("quantize_x8")
void quantize_x8(const float* x, int nb, int T, int8_t* x8, float* sc) {
  int32_t* isum = (int32_t*)(x8 + 32 * nb * T);
  for (int i = 0; i < nb * T; i++) {
    const float* v = x + 32 * i;
    float amax = 0.0f;
    for (int k = 0; k < 32; k++) {
      float a = v[k] < 0.0f ? -v[k] : v[k];
      amax = a > amax ? a : amax;
    }
    v128_t inv = wasm_f32x4_splat(amax > 0.0f ? 127.0f / amax : 0.0f);
    v128_t q[8];
#pragma clang loop unroll(full)
    for (int j = 0; j < 8; j++) {  /* nearest, then saturating: NaN becomes 0, never a trap */
      q[j] = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(v + 4 * j), inv)));
    }
    v128_t lo = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(q[0], q[1]), wasm_i16x8_narrow_i32x4(q[2], q[3]));
    v128_t hi = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(q[4], q[5]), wasm_i16x8_narrow_i32x4(q[6], q[7]));
    wasm_v128_store(x8 + 32 * i, lo);
    wasm_v128_store(x8 + 32 * i + 16, hi);
    v128_t s0 = wasm_i32x4_add(wasm_i32x4_add(q[0], q[1]), wasm_i32x4_add(q[2], q[3]));
    v128_t s1 = wasm_i32x4_add(wasm_i32x4_add(q[4], q[5]), wasm_i32x4_add(q[6], q[7]));
    isum[2 * i] = wasm_i32x4_extract_lane(s0, 0) + wasm_i32x4_extract_lane(s0, 1) +
                  wasm_i32x4_extract_lane(s0, 2) + wasm_i32x4_extract_lane(s0, 3);
    isum[2 * i + 1] = wasm_i32x4_extract_lane(s1, 0) + wasm_i32x4_extract_lane(s1, 1) +
                      wasm_i32x4_extract_lane(s1, 2) + wasm_i32x4_extract_lane(s1, 3);
    sc[2 * i] = amax / 127.0f;
    sc[2 * i + 1] = (float)(isum[2 * i] + isum[2 * i + 1]) * sc[2 * i];
  }
}

#define DOT(a, b, c) wasm_i32x4_relaxed_dot_i8x16_i7x16_add(a, b, c)

/* Q8_0: a block's signed bytes w -> u = w & 127 (in place) and neg = (w < 0), both 7-bit. */
INLINE void split_signed(Block* k, v128_t neg[2]) {
#pragma clang loop unroll(full)
  for (int j = 0; j < 2; j++) {
    neg[j] = wasm_u8x16_shr(k->u[j], 7);
    k->u[j] = wasm_v128_and(k->u[j], wasm_u8x16_splat(127));
  }
}

/* Four rows' exact integer sums over columns 16 h .. 16 h + 15 (h = 0, 1) or, with h = 2,
 * over all 32 columns, against a0 (qx columns 0..15) and a1 (16..31): lane r is row r's
 * sum u * qx (Q8_0: minus 128 times its negative weights' qx) less off * `isum`. */
INLINE v128_t block_sums(int kind, const Block* k, v128_t neg[4][2], v128_t a0, v128_t a1,
                         int h, int32_t isum) {
  v128_t d[4];
  v128_t zero = wasm_i32x4_splat(0);
#pragma clang loop unroll(full)
  for (int r = 0; r < 4; r++) {
    if (h == 0) d[r] = DOT(a0, k[r].u[0], zero);
    else if (h == 1) d[r] = DOT(a1, k[r].u[1], zero);
    else d[r] = DOT(a1, k[r].u[1], DOT(a0, k[r].u[0], zero));
    if (kind == Q8_0) {
      v128_t n = DOT(a1, neg[r][1], DOT(a0, neg[r][0], zero));
      d[r] = wasm_i32x4_sub(d[r], wasm_i32x4_shl(n, 7));
    }
  }
  v128_t s = reduce4(d[0], d[1], d[2], d[3]);
  return k[0].off ? wasm_i32x4_sub(s, wasm_i32x4_splat(k[0].off * isum)) : s;
}

/* One kind's rows [first, last), four at a time (group_rows): `acc` and `macc` are [T]
 * f32x4 scratch, one lane per row. */
INLINE void rows_of(int kind, const uint8_t* w, const int8_t* x8, const float* sc,
                    const float* s16, float* y, v128_t* acc, v128_t* macc, int rows, int nb,
                    int T, int first, int last) {
  int sixteen = sixteen_columns(kind), mins = has_mins(kind);
  int stride = row_bytes(kind, nb);
  const int32_t* isum = (const int32_t*)(x8 + 32 * nb * T);
  Block k[4];
  v128_t neg[4][2];
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
        if (kind == Q8_0) split_signed(&k[i], neg[i]);
      }
      v128_t scale0 = lanes(k, 0, 0);
      v128_t scale1 = sixteen ? lanes(k, 0, 1) : scale0;
      v128_t min0 = mins ? lanes(k, 1, 0) : scale0;
      v128_t min1 = mins && sixteen ? lanes(k, 1, 1) : scale0;
      for (int t = 0; t < T; t++) {
        int at = t * nb + b;
        v128_t a0 = wasm_v128_load(x8 + 32 * at), a1 = wasm_v128_load(x8 + 32 * at + 16);
        v128_t dx = wasm_f32x4_splat(sc[2 * at]);
        if (sixteen) {
          v128_t s0 = wasm_f32x4_convert_i32x4(block_sums(kind, k, neg, a0, a1, 0, isum[2 * at]));
          v128_t s1 = wasm_f32x4_convert_i32x4(block_sums(kind, k, neg, a0, a1, 1, isum[2 * at + 1]));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s0, wasm_f32x4_mul(scale0, dx)));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s1, wasm_f32x4_mul(scale1, dx)));
          if (mins) {
            float sum0 = (float)isum[2 * at] * sc[2 * at], sum1 = (float)isum[2 * at + 1] * sc[2 * at];
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min0, wasm_f32x4_splat(sum0)));
            macc[t] = wasm_f32x4_add(macc[t], wasm_f32x4_mul(min1, wasm_f32x4_splat(sum1)));
          }
        } else {
          int32_t both = isum[2 * at] + isum[2 * at + 1];
          v128_t s = wasm_f32x4_convert_i32x4(block_sums(kind, k, neg, a0, a1, 2, both));
          acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(s, wasm_f32x4_mul(scale0, dx)));
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
