/*
 * Quantized matmuls straight over GGUF blocks as stored: y[t, r] = dot(W[r, :], x[t, :]) for
 * Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights. The weights are used in place (no
 * repacking, no float copy), so the kernel memory holds each tensor at its file size.
 *
 * Math: the same activation split as matmul_q.wat (apr_webkernel.py has the accuracy
 * argument): every 32-column block b of x is scaled by dx = max|x| / 32767 and written as two
 * int16 terms xh, xl (quantize_x of matmul_q.wat), so the weights' integer codes q meet x in
 * exact `i32x4.dot_i16x8_s` sums. Per sub-block (32 columns, or 16 for the 16-column scales of
 * Q2_K, Q3_K and Q6_K), in float32 and in this order:
 *     s    = f32(sum q*xh) + f32(sum q*xl) * 2^-15
 *     acc  = acc + s * (scale * dx)              scale = d * sub-block scale (exact in f32)
 *     macc = macc + min * sum(x over the sub-block)         (types with an offset only)
 *     y    = acc - macc   (K-quants: w = scale * q - min)   or acc + macc (Q5_1: d * q + m)
 * WebAssembly has no FMA and this file is built with -ffp-contract=off, so the kernel equals
 * a float32 replay of these steps bit for bit (wasm_tests/test_kquant_kernel.py).
 *
 * Code layouts (ggml's block_* structs; every field little-endian, halves are IEEE f16):
 *   Q5_0 [22 B]: d, qh u32, qs[16]       q = nibble | qh bit << 4, minus 16
 *   Q5_1 [24 B]: d, m, qh u32, qs[16]     q = nibble | qh bit << 4
 *   Q2_K [84 B]: scales[16] (4-bit scale, 4-bit min), qs[64], d, dmin
 *   Q3_K [110 B]: hmask[32], qs[64], scales[12] (6-bit, minus 32), d
 *   Q4_K [144 B]: d, dmin, scales[12] (6-bit scale/min pairs), qs[128]
 *   Q5_K [176 B]: d, dmin, scales[12], qh[32], qs[128]
 *   Q6_K [210 B]: ql[128], qh[64], scales[16] int8, d
 * Build: scripts/build_wasm_kernels.py (zig cc, wasm32 with SIMD128).
 */
#include <stdint.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))
#define INLINE static inline __attribute__((always_inline))

/* Kind codes: apr_webkernel.QUANTIZED (1 and 2 are matmul_q.wat's Q4_1 and Q8_0). */
enum { Q5_0 = 3, Q5_1 = 4, Q2_K = 5, Q3_K = 6, Q4_K = 7, Q5_K = 8, Q6_K = 9 };

/* A 32-column block of codes: four i16x8 vectors in column order, and its one or two
 * sub-blocks' float32 scales and mins. */
typedef struct {
  v128_t c[4];
  float scale[2];
  float min[2];
} Block;

INLINE uint32_t load_u16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
INLINE uint32_t load_u32(const uint8_t* p) { return load_u16(p) | (load_u16(p + 2) << 16); }

/* IEEE half bits -> float32, exactly (subnormals, infinities and NaN payloads included). */
INLINE float half(const uint8_t* p) {
  uint32_t h = load_u16(p);
  uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 0x3ff;
  union { uint32_t u; float f; } v;
  if (e == 0) {
    v.f = (float)m * 0x1p-24f;
    v.u |= s;
    return v.f;
  }
  v.u = s | (m << 13) | (e == 31 ? 0x7f800000u : (e + 112) << 23);
  return v.f;
}

/* Codes 0..15 and 16..31 of a block as bytes -> the four i16x8 vectors (signed bytes). */
INLINE void widen_signed(Block* k, v128_t lo, v128_t hi) {
  k->c[0] = wasm_i16x8_extend_low_i8x16(lo);
  k->c[1] = wasm_i16x8_extend_high_i8x16(lo);
  k->c[2] = wasm_i16x8_extend_low_i8x16(hi);
  k->c[3] = wasm_i16x8_extend_high_i8x16(hi);
}

/* Bits 0..15 (half 0) or 16..31 (half 1) of `bits`, one per byte, as 0 or `value`. */
INLINE v128_t bit_bytes(uint32_t bits, int part, uint8_t value) {
  v128_t spread = wasm_i8x16_swizzle(
      wasm_i32x4_splat((int32_t)bits),
      part ? wasm_i8x16_const(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)
           : wasm_i8x16_const(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  v128_t mask = wasm_u8x16_const(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
  return wasm_v128_and(wasm_i8x16_eq(wasm_v128_and(spread, mask), mask),
                       wasm_u8x16_splat(value));
}

/* Q5_0 / Q5_1 block b of a row: low nibbles are columns 0..15, high nibbles 16..31. */
INLINE void decode_q5(const uint8_t* row, int b, int with_min, Block* k) {
  const uint8_t* blk = row + b * (with_min ? 24 : 22);
  const uint8_t* qs = blk + (with_min ? 8 : 6);
  uint32_t qh = load_u32(blk + (with_min ? 4 : 2));
  v128_t v = wasm_v128_load(qs);
  v128_t nibble = wasm_u8x16_splat(15);
  v128_t lo = wasm_v128_or(wasm_v128_and(v, nibble), bit_bytes(qh, 0, 16));
  v128_t hi = wasm_v128_or(wasm_u8x16_shr(v, 4), bit_bytes(qh, 1, 16));
  if (!with_min) {
    lo = wasm_i8x16_sub(lo, wasm_i8x16_splat(16));
    hi = wasm_i8x16_sub(hi, wasm_i8x16_splat(16));
  }
  widen_signed(k, lo, hi);  /* codes 0..31 or -16..15 fit signed bytes */
  k->scale[0] = half(blk);
  k->min[0] = with_min ? half(blk + 2) : 0.0f;
}

/* Q4_K / Q5_K scale and min j (0..7) from the 12 packed bytes (ggml's get_scale_min_k4). */
INLINE void scale_min_k4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/* Q4_K (width 144) / Q5_K (width 176) block b: sub-block kb of superblock b / 8. Columns
 * 64c..64c+31 are the low nibbles of qs[32c..32c+31], 64c+32.. the high ones; Q5_K's fifth
 * bit of sub-block kb is bit kb of qh[column % 32]. */
INLINE void decode_q45_k(const uint8_t* row, int b, int five, Block* k) {
  const uint8_t* sb = row + (b >> 3) * (five ? 176 : 144);
  int kb = b & 7, scale, min;
  const uint8_t* qs = sb + (five ? 48 : 16) + 32 * (kb >> 1);
  v128_t lo = wasm_v128_load(qs), hi = wasm_v128_load(qs + 16);
  if (kb & 1) {
    lo = wasm_u8x16_shr(lo, 4);
    hi = wasm_u8x16_shr(hi, 4);
  } else {
    lo = wasm_v128_and(lo, wasm_u8x16_splat(15));
    hi = wasm_v128_and(hi, wasm_u8x16_splat(15));
  }
  if (five) {
    v128_t one = wasm_u8x16_splat(1);
    lo = wasm_v128_or(lo, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb + 16), kb), one), 4));
    hi = wasm_v128_or(hi, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb + 32), kb), one), 4));
  }
  widen_signed(k, lo, hi);  /* 0..31 */
  scale_min_k4(kb, sb + 4, &scale, &min);
  k->scale[0] = half(sb) * (float)scale;
  k->min[0] = half(sb + 2) * (float)min;
}

/* Q6_K block b: kb = 4n + g of superblock b / 8; low nibbles from ql + 64n + 32(g & 1) (high
 * nibbles when g >= 2), two more bits from qh + 32n at bit 2g; 16-column scales 8n + 2g + h. */
INLINE void decode_q6_k(const uint8_t* row, int b, Block* k) {
  const uint8_t* sb = row + (b >> 3) * 210;
  int kb = b & 7, n = kb >> 2, g = kb & 3;
  const uint8_t* ql = sb + 64 * n + 32 * (g & 1);
  const uint8_t* qh = sb + 128 + 32 * n;
  v128_t lo = wasm_v128_load(ql), hi = wasm_v128_load(ql + 16);
  if (g >= 2) {
    lo = wasm_u8x16_shr(lo, 4);
    hi = wasm_u8x16_shr(hi, 4);
  } else {
    lo = wasm_v128_and(lo, wasm_u8x16_splat(15));
    hi = wasm_v128_and(hi, wasm_u8x16_splat(15));
  }
  v128_t three = wasm_u8x16_splat(3), bias = wasm_i8x16_splat(32);
  lo = wasm_v128_or(lo, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qh), 2 * g), three), 4));
  hi = wasm_v128_or(hi, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qh + 16), 2 * g), three), 4));
  widen_signed(k, wasm_i8x16_sub(lo, bias), wasm_i8x16_sub(hi, bias));  /* -32..31 */
  float d = half(sb + 208);
  const int8_t* scales = (const int8_t*)(sb + 192) + 8 * n + 2 * g;
  k->scale[0] = d * (float)scales[0];
  k->scale[1] = d * (float)scales[1];
}

/* Q3_K's sixteen 6-bit scales (ggml's kmask unpacking), minus 32. */
INLINE int q3_scale(const uint8_t* packed, int i) {
  int low = i < 8 ? packed[i] & 15 : packed[i - 8] >> 4;
  int high = (packed[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

/* Q2_K / Q3_K block b: kb = 4n + j of superblock b / 8, two bits (q >> 2j) & 3 of
 * qs + 32n; Q3_K subtracts 4 where bit 4n + j of hmask is clear. Scales 2kb + h. */
INLINE void decode_q23_k(const uint8_t* row, int b, int three, Block* k) {
  const uint8_t* sb = row + (b >> 3) * (three ? 110 : 84);
  int kb = b & 7, n = kb >> 2, j = kb & 3;
  const uint8_t* qs = sb + (three ? 32 : 16) + 32 * n;
  v128_t mask = wasm_u8x16_splat(3);
  v128_t lo = wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qs), 2 * j), mask);
  v128_t hi = wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qs + 16), 2 * j), mask);
  if (three) {
    v128_t one = wasm_u8x16_splat(1), four = wasm_i8x16_splat(4);
    int bit = 4 * n + j;
    /* q - 4 + 4 * hbit */
    lo = wasm_i8x16_sub(wasm_v128_or(lo, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb), bit), one), 2)), four);
    hi = wasm_i8x16_sub(wasm_v128_or(hi, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb + 16), bit), one), 2)), four);
    float d = half(sb + 108);
    k->scale[0] = d * (float)q3_scale(sb + 96, 2 * kb);
    k->scale[1] = d * (float)q3_scale(sb + 96, 2 * kb + 1);
  } else {
    float d = half(sb + 80), dmin = half(sb + 82);
    int s0 = sb[2 * kb], s1 = sb[2 * kb + 1];
    k->scale[0] = d * (float)(s0 & 15);
    k->scale[1] = d * (float)(s1 & 15);
    k->min[0] = dmin * (float)(s0 >> 4);
    k->min[1] = dmin * (float)(s1 >> 4);
  }
  widen_signed(k, lo, hi);
}

INLINE void decode(int kind, const uint8_t* row, int b, Block* k) {
  switch (kind) {
    case Q5_0: decode_q5(row, b, 0, k); break;
    case Q5_1: decode_q5(row, b, 1, k); break;
    case Q2_K: decode_q23_k(row, b, 0, k); break;
    case Q3_K: decode_q23_k(row, b, 1, k); break;
    case Q4_K: decode_q45_k(row, b, 0, k); break;
    case Q5_K: decode_q45_k(row, b, 1, k); break;
    default: decode_q6_k(row, b, k); break;
  }
}

/* Exact integer dots of codes c[from..from+count) with xh and xl -> s (float32, as above). */
INLINE float block_sum(const v128_t* c, const int16_t* xh, int from, int count) {
  v128_t ih = wasm_i32x4_dot_i16x8(c[from], wasm_v128_load(xh + 8 * from));
  v128_t il = wasm_i32x4_dot_i16x8(c[from], wasm_v128_load(xh + 32 + 8 * from));
  for (int i = from + 1; i < from + count; i++) {
    ih = wasm_i32x4_add(ih, wasm_i32x4_dot_i16x8(c[i], wasm_v128_load(xh + 8 * i)));
    il = wasm_i32x4_add(il, wasm_i32x4_dot_i16x8(c[i], wasm_v128_load(xh + 32 + 8 * i)));
  }
  v128_t pairs = wasm_i32x4_add(wasm_i32x4_shuffle(ih, il, 0, 1, 4, 5),
                                wasm_i32x4_shuffle(ih, il, 2, 3, 6, 7));
  int32_t h = wasm_i32x4_extract_lane(pairs, 0) + wasm_i32x4_extract_lane(pairs, 1);
  int32_t l = wasm_i32x4_extract_lane(pairs, 2) + wasm_i32x4_extract_lane(pairs, 3);
  return (float)h + (float)l * 0x1p-15f;
}

/* Bytes of one row of `cols` columns, per kind. */
INLINE int row_bytes(int kind, int nb) {
  switch (kind) {
    case Q5_0: return nb * 22;
    case Q5_1: return nb * 24;
    case Q2_K: return (nb >> 3) * 84;
    case Q3_K: return (nb >> 3) * 110;
    case Q4_K: return (nb >> 3) * 144;
    case Q5_K: return (nb >> 3) * 176;
    default: return (nb >> 3) * 210;
  }
}

/* One kind's rows [first, last): `acc` and `macc` are [T] float32 scratch. */
INLINE void rows_of(int kind, const uint8_t* w, const int16_t* xq, const float* sc,
                    const float* s16, float* y, float* acc, float* macc, int rows, int nb,
                    int T, int first, int last) {
  int sixteen = kind == Q2_K || kind == Q3_K || kind == Q6_K;
  int mins = kind == Q5_1 || kind == Q2_K || kind == Q4_K || kind == Q5_K;
  int stride = row_bytes(kind, nb);
  Block k;
  for (int r = first; r < last; r++) {
    const uint8_t* row = w + (uint32_t)r * (uint32_t)stride;
    for (int t = 0; t < T; t++) acc[t] = macc[t] = 0.0f;
    for (int b = 0; b < nb; b++) {
      decode(kind, row, b, &k);
      for (int t = 0; t < T; t++) {
        int at = t * nb + b;
        const int16_t* xh = xq + 64 * at;
        float dx = sc[2 * at];
        if (sixteen) {
          acc[t] = acc[t] + block_sum(k.c, xh, 0, 2) * (k.scale[0] * dx);
          acc[t] = acc[t] + block_sum(k.c, xh, 2, 2) * (k.scale[1] * dx);
          if (mins) {
            macc[t] = macc[t] + k.min[0] * s16[2 * at];
            macc[t] = macc[t] + k.min[1] * s16[2 * at + 1];
          }
        } else {
          acc[t] = acc[t] + block_sum(k.c, xh, 0, 4) * (k.scale[0] * dx);
          if (mins) macc[t] = macc[t] + k.min[0] * sc[2 * at + 1];
        }
      }
    }
    for (int t = 0; t < T; t++) {
      float out = acc[t];
      if (kind == Q5_1) out = acc[t] + macc[t];
      else if (mins) out = acc[t] - macc[t];
      y[t * rows + r] = out;
    }
  }
}

/* Weight `w` (GGUF blocks [rows, cols]) times the split x (xq [T, nb, 64] int16 and
 * sc [T, nb, 2] from matmul_q's quantize_x; s16 [T, 2 nb] from sums16 for Q2_K, else unused)
 * -> y [T, rows], rows [first, last) only (a thread's share). */
EXPORT("matmul_k")
void matmul_k(int kind, const uint8_t* w, const int16_t* xq, const float* sc, const float* s16,
              float* y, float* acc, float* macc, int rows, int nb, int T, int first, int last) {
  switch (kind) {  /* one specialized loop per kind */
    case Q5_0: rows_of(Q5_0, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    case Q5_1: rows_of(Q5_1, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    case Q2_K: rows_of(Q2_K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    case Q3_K: rows_of(Q3_K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    case Q4_K: rows_of(Q4_K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    case Q5_K: rows_of(Q5_K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
    default: rows_of(Q6_K, w, xq, sc, s16, y, acc, macc, rows, nb, T, first, last); break;
  }
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
  if (kind < Q5_0 || kind > Q6_K) return 0;
  return rows * row_bytes(kind, nb);
}
