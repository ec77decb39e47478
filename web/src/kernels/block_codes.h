/*
 * What the shell's two block-matmul kernels share (matmul_k.c, exact; matmul_r.c, relaxed SIMD):
 * the GGUF block layouts read in place, decoded per 32-column block into code bytes, and the
 * scale helpers. A decoder leaves in `Block.u` the block's codes as bytes (columns 0..15 and
 * 16..31) and in `off` the offset they carry: the signed code is u - off (Q4_0: 8, Q5_0: 16,
 * Q3_K: 4, Q6_K: 32, else 0), so every u but Q8_0's is 0..63, a valid 7-bit operand of
 * `i32x4.relaxed_dot_i8x16_i7x16_add_s`; Q8_0's u are its signed bytes.
 *
 * Code layouts (ggml's block_* structs; every field little-endian, halves are IEEE f16):
 *   Q4_0 [18 B]: d, qs[16]               q = nibble minus 8 (low nibbles columns 0..15)
 *   Q4_1 [20 B]: d, m, qs[16]            q = nibble
 *   Q8_0 [34 B]: d, qs[32] int8
 *   Q5_0 [22 B]: d, qh u32, qs[16]       q = nibble | qh bit << 4, minus 16
 *   Q5_1 [24 B]: d, m, qh u32, qs[16]     q = nibble | qh bit << 4
 *   Q2_K [84 B]: scales[16] (4-bit scale, 4-bit min), qs[64], d, dmin
 *   Q3_K [110 B]: hmask[32], qs[64], scales[12] (6-bit, minus 32), d
 *   Q4_K [144 B]: d, dmin, scales[12] (6-bit scale/min pairs), qs[128]
 *   Q5_K [176 B]: d, dmin, scales[12], qh[32], qs[128]
 *   Q6_K [210 B]: ql[128], qh[64], scales[16] int8, d
 */
#ifndef BLOCK_CODES_H
#define BLOCK_CODES_H
#include <stdint.h>
#include <wasm_simd128.h>

#if defined(__wasm__)
#define EXPORT(name) __attribute__((export_name(name)))
#else  /* the native build of the same kernels (apr_native/simd) */
#define EXPORT(name) __attribute__((visibility("default")))
#endif
#define INLINE static inline __attribute__((always_inline))

/* Kind codes: apr_webkernel.QUANTIZED. */
enum { Q4_1 = 1, Q8_0 = 2, Q5_0 = 3, Q5_1 = 4, Q2_K = 5, Q3_K = 6, Q4_K = 7, Q5_K = 8, Q6_K = 9,
       Q4_0 = 10 };

/* A 32-column block of codes: the code bytes u (columns 0..15, 16..31) and their offset
 * (signed code = u - off), the exact kernel's four i16x8 vectors of signed codes in column
 * order (`c`, filled by matmul_k.c), and the one or two sub-blocks' scales and mins as f16
 * bits times small integers (scale h = half(d) * sc[h], min h = half(dmin) * mn[h]: exact in
 * float32), widened four rows at a time by `lanes`. */
typedef struct {
  v128_t u[2];
  int off;
  v128_t c[4];
  uint32_t d, dmin;
  int32_t sc[2], mn[2];
} Block;

INLINE void set_codes(Block* k, v128_t lo, v128_t hi, int off) {
  k->u[0] = lo;
  k->u[1] = hi;
  k->off = off;
}

/* A decoded block's signed codes u - off (columns 0..15, 16..31: they fit signed bytes) ->
 * the four i16x8 vectors. */
INLINE void widen_codes(Block* k) {
  v128_t off = wasm_i8x16_splat((int8_t)k->off);
  v128_t lo = wasm_i8x16_sub(k->u[0], off), hi = wasm_i8x16_sub(k->u[1], off);
  k->c[0] = wasm_i16x8_extend_low_i8x16(lo);
  k->c[1] = wasm_i16x8_extend_high_i8x16(lo);
  k->c[2] = wasm_i16x8_extend_low_i8x16(hi);
  k->c[3] = wasm_i16x8_extend_high_i8x16(hi);
}

INLINE uint32_t load_u16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
INLINE uint32_t load_u32(const uint8_t* p) { return load_u16(p) | (load_u16(p + 2) << 16); }

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
  set_codes(k, lo, hi, with_min ? 0 : 16);  /* u 0..31 */
  k->d = load_u16(blk);
  k->sc[0] = 1;
  k->dmin = with_min ? load_u16(blk + 2) : 0;
  k->mn[0] = 1;
}

/* Q4_0 / Q4_1 block b: low nibbles are columns 0..15, high nibbles 16..31. */
INLINE void decode_q4(const uint8_t* row, int b, int with_min, Block* k) {
  const uint8_t* blk = row + b * (with_min ? 20 : 18);
  v128_t v = wasm_v128_load(blk + (with_min ? 4 : 2));
  v128_t lo = wasm_v128_and(v, wasm_u8x16_splat(15)), hi = wasm_u8x16_shr(v, 4);
  set_codes(k, lo, hi, with_min ? 0 : 8);  /* u 0..15 */
  k->d = load_u16(blk);
  k->sc[0] = 1;
  k->dmin = with_min ? load_u16(blk + 2) : 0;
  k->mn[0] = 1;
}

/* Q8_0 block b: 32 signed bytes. */
INLINE void decode_q8_0(const uint8_t* row, int b, Block* k) {
  const uint8_t* blk = row + b * 34;
  set_codes(k, wasm_v128_load(blk + 2), wasm_v128_load(blk + 18), 0);  /* signed bytes */
  k->d = load_u16(blk);
  k->sc[0] = 1;
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
  set_codes(k, lo, hi, 0);  /* u 0..31 */
  scale_min_k4(kb, sb + 4, &scale, &min);
  k->d = load_u16(sb);
  k->dmin = load_u16(sb + 2);
  k->sc[0] = scale;
  k->mn[0] = min;
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
  v128_t three = wasm_u8x16_splat(3);
  lo = wasm_v128_or(lo, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qh), 2 * g), three), 4));
  hi = wasm_v128_or(hi, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qh + 16), 2 * g), three), 4));
  set_codes(k, lo, hi, 32);  /* u 0..63 */
  const int8_t* scales = (const int8_t*)(sb + 192) + 8 * n + 2 * g;
  k->d = load_u16(sb + 208);
  k->sc[0] = scales[0];
  k->sc[1] = scales[1];
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
    v128_t one = wasm_u8x16_splat(1);
    int bit = 4 * n + j;
    /* u = q + 4 hbit, signed code u - 4 */
    lo = wasm_v128_or(lo, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb), bit), one), 2));
    hi = wasm_v128_or(hi, wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(sb + 16), bit), one), 2));
    k->d = load_u16(sb + 108);
    k->sc[0] = q3_scale(sb + 96, 2 * kb);
    k->sc[1] = q3_scale(sb + 96, 2 * kb + 1);
  } else {
    int s0 = sb[2 * kb], s1 = sb[2 * kb + 1];
    k->d = load_u16(sb + 80);
    k->dmin = load_u16(sb + 82);
    k->sc[0] = s0 & 15;
    k->sc[1] = s1 & 15;
    k->mn[0] = s0 >> 4;
    k->mn[1] = s1 >> 4;
  }
  set_codes(k, lo, hi, three ? 4 : 0);  /* u 0..7 */
}

INLINE void decode(int kind, const uint8_t* row, int b, Block* k) {
  switch (kind) {
    case Q4_0: decode_q4(row, b, 0, k); break;
    case Q4_1: decode_q4(row, b, 1, k); break;
    case Q8_0: decode_q8_0(row, b, k); break;
    case Q5_0: decode_q5(row, b, 0, k); break;
    case Q5_1: decode_q5(row, b, 1, k); break;
    case Q2_K: decode_q23_k(row, b, 0, k); break;
    case Q3_K: decode_q23_k(row, b, 1, k); break;
    case Q4_K: decode_q45_k(row, b, 0, k); break;
    case Q5_K: decode_q45_k(row, b, 1, k); break;
    default: decode_q6_k(row, b, k); break;
  }
}

/* Four rows' i32x4 partial sums -> one vector whose lane r is row r's total (exact). */
INLINE v128_t reduce4(v128_t a0, v128_t a1, v128_t a2, v128_t a3) {
  v128_t a = wasm_i32x4_add(wasm_i32x4_shuffle(a0, a1, 0, 4, 1, 5), wasm_i32x4_shuffle(a0, a1, 2, 6, 3, 7));
  v128_t b = wasm_i32x4_add(wasm_i32x4_shuffle(a2, a3, 0, 4, 1, 5), wasm_i32x4_shuffle(a2, a3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 1, 4, 5), wasm_i32x4_shuffle(a, b, 2, 3, 6, 7));
}

/* Four IEEE half bit patterns (one per i32 lane) -> float32, exactly: the bits moved into a
 * float32's place read as 2^-112 times the value (subnormals included), so one exact
 * multiplication by 2^112 rescales; exponent 31 (infinities, NaN payloads) is set apart. */
INLINE v128_t halves(v128_t h) {
  v128_t magnitude = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
  v128_t value = wasm_f32x4_mul(magnitude, wasm_f32x4_splat(0x1p112f));
  v128_t special = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7c00)), wasm_i32x4_splat(0x7c00));
  value = wasm_v128_bitselect(wasm_v128_or(magnitude, wasm_i32x4_splat(0x7f800000)), value, special);
  return wasm_v128_or(value, wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16));
}

/* Four rows' scale (field 0) or min (field 1) of sub-block h, one lane per row. */
INLINE v128_t lanes(const Block* k, int field, int h) {
  if (field) {
    return wasm_f32x4_mul(halves(wasm_i32x4_make(k[0].dmin, k[1].dmin, k[2].dmin, k[3].dmin)),
                          wasm_f32x4_convert_i32x4(wasm_i32x4_make(k[0].mn[h], k[1].mn[h], k[2].mn[h], k[3].mn[h])));
  }
  return wasm_f32x4_mul(halves(wasm_i32x4_make(k[0].d, k[1].d, k[2].d, k[3].d)),
                        wasm_f32x4_convert_i32x4(wasm_i32x4_make(k[0].sc[h], k[1].sc[h], k[2].sc[h], k[3].sc[h])));
}

/* The four rows of group g of a thread's share [first, last) (groups = ceil(count / 4)):
 * rows g, q + g, 2q + g and 3q + g of the share (q = count / 4), so that the four rows a
 * kernel reads side by side advance through four long runs of memory, which the hardware
 * prefetches, instead of four short rows that restart every group (a 640-column Q8_0
 * matrix streamed at a quarter of the speed); the last group takes the 1..3 rows left,
 * repeating its last (a repeated row computes, and stores, the same value). */
INLINE void group_rows(int first, int last, int g, int out[4]) {
  int q = (last - first) >> 2;
  if (g < q) {
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; i++) out[i] = first + i * q + g;
  } else {
    int start = first + 4 * q;
#pragma clang loop unroll(full)
    for (int i = 0; i < 4; i++) out[i] = start + i < last ? start + i : last - 1;
  }
}

INLINE int group_count(int first, int last) { return (last - first + 3) >> 2; }

/* Store lane i of `out` at y[at[i]]. */
INLINE void store_rows(float* y, const int at[4], v128_t out) {
  y[at[0]] = wasm_f32x4_extract_lane(out, 0);
  y[at[1]] = wasm_f32x4_extract_lane(out, 1);
  y[at[2]] = wasm_f32x4_extract_lane(out, 2);
  y[at[3]] = wasm_f32x4_extract_lane(out, 3);
}

/* Per kind: 16-column sub-blocks (two scales per 32 columns); w = d q + m (a min added);
 * any min term (those, and the K-quants that subtract theirs). */
INLINE int sixteen_columns(int kind) { return kind == Q2_K || kind == Q3_K || kind == Q6_K; }
INLINE int adds_min(int kind) { return kind == Q4_1 || kind == Q5_1; }
INLINE int has_mins(int kind) { return adds_min(kind) || kind == Q2_K || kind == Q4_K || kind == Q5_K; }

/* A row group's outputs per token: acc + macc (Q4_1, Q5_1), acc - macc (K-quants with mins)
 * or acc, stored in its rows of y [T, rows]. */
INLINE void store_group(int kind, const v128_t* acc, const v128_t* macc, float* y, int rows,
                        int T, const int at[4]) {
  for (int t = 0; t < T; t++) {
    v128_t out = acc[t];
    if (adds_min(kind)) out = wasm_f32x4_add(acc[t], macc[t]);
    else if (has_mins(kind)) out = wasm_f32x4_sub(acc[t], macc[t]);
    store_rows(y + t * rows, at, out);
  }
}

/* `switch (kind)` with one specialized expansion of `call(KIND)` per kind. */
#define FOR_EACH_KIND(kind, call) \
  switch (kind) { \
    case Q4_0: call(Q4_0); break; \
    case Q4_1: call(Q4_1); break; \
    case Q8_0: call(Q8_0); break; \
    case Q5_0: call(Q5_0); break; \
    case Q5_1: call(Q5_1); break; \
    case Q2_K: call(Q2_K); break; \
    case Q3_K: call(Q3_K); break; \
    case Q4_K: call(Q4_K); break; \
    case Q5_K: call(Q5_K); break; \
    default: call(Q6_K); break; \
  }

/* Bytes of one row of `cols` columns, per kind. */
INLINE int row_bytes(int kind, int nb) {
  switch (kind) {
    case Q4_0: return nb * 18;
    case Q4_1: return nb * 20;
    case Q8_0: return nb * 34;
    case Q5_0: return nb * 22;
    case Q5_1: return nb * 24;
    case Q2_K: return (nb >> 3) * 84;
    case Q3_K: return (nb >> 3) * 110;
    case Q4_K: return (nb >> 3) * 144;
    case Q5_K: return (nb >> 3) * 176;
    default: return (nb >> 3) * 210;
  }
}

#endif
