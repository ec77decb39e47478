/*
 * WebAssembly SIMD128's C intrinsics (the subset the shell's block kernels use,
 * web/src/kernels/*.c) for a native build: each has wasm's exact lane semantics, on clang's
 * vector extensions, with x86's SSE/AVX instruction where one computes the same thing. The
 * native build (apr_native/simd/build.py) puts this directory first on the include path, so
 * the browser's kernel sources compile unchanged and compute what they compute in wasm (the
 * float steps are the same IEEE float32 operations; -ffp-contract=off keeps them unfused).
 */
#ifndef APR_NATIVE_WASM_SIMD128_H
#define APR_NATIVE_WASM_SIMD128_H
#include <stdint.h>
#if defined(__SSSE3__)
#include <immintrin.h>
#endif

typedef int32_t v128_t __attribute__((vector_size(16), aligned(16)));
typedef int8_t apr_i8x16 __attribute__((vector_size(16)));
typedef uint8_t apr_u8x16 __attribute__((vector_size(16)));
typedef int16_t apr_i16x8 __attribute__((vector_size(16)));
typedef int32_t apr_i32x8 __attribute__((vector_size(32)));
typedef int16_t apr_i16x16 __attribute__((vector_size(32)));
typedef uint32_t apr_u32x4 __attribute__((vector_size(16)));
typedef float apr_f32x4 __attribute__((vector_size(16)));
typedef long long apr_i64x2 __attribute__((vector_size(16)));

#define APR_SIMD static inline __attribute__((always_inline))

APR_SIMD v128_t wasm_v128_load(const void* p) {
  v128_t v;
  __builtin_memcpy(&v, p, 16);
  return v;
}
APR_SIMD void wasm_v128_store(void* p, v128_t v) { __builtin_memcpy(p, &v, 16); }
APR_SIMD v128_t wasm_v128_and(v128_t a, v128_t b) { return a & b; }
APR_SIMD v128_t wasm_v128_or(v128_t a, v128_t b) { return a | b; }
APR_SIMD v128_t wasm_v128_bitselect(v128_t a, v128_t b, v128_t mask) {
  return (a & mask) | (b & ~mask);
}

/* Splats, constants, lanes. */
APR_SIMD v128_t wasm_i8x16_splat(int8_t x) { return (v128_t)((apr_i8x16){0} + x); }
APR_SIMD v128_t wasm_u8x16_splat(uint8_t x) { return (v128_t)((apr_u8x16){0} + x); }
APR_SIMD v128_t wasm_i32x4_splat(int32_t x) { return (v128_t){x, x, x, x}; }
APR_SIMD v128_t wasm_f32x4_splat(float x) { return (v128_t)((apr_f32x4){x, x, x, x}); }
APR_SIMD v128_t wasm_i32x4_make(int32_t a, int32_t b, int32_t c, int32_t d) {
  return (v128_t){a, b, c, d};
}
#define wasm_i8x16_const(...) ((v128_t)((apr_i8x16){__VA_ARGS__}))
#define wasm_u8x16_const(...) ((v128_t)((apr_u8x16){__VA_ARGS__}))
#define wasm_i32x4_extract_lane(v, i) ((int32_t)(v)[i])
#define wasm_f32x4_extract_lane(v, i) (((apr_f32x4)(v))[i])
#define wasm_i32x4_shuffle(a, b, c0, c1, c2, c3) \
  ((v128_t)__builtin_shufflevector((v128_t)(a), (v128_t)(b), c0, c1, c2, c3))

/* Integer arithmetic (wrapping, as wasm's). Shift counts are taken modulo the lane width. */
APR_SIMD v128_t wasm_i8x16_sub(v128_t a, v128_t b) {
  return (v128_t)((apr_u8x16)a - (apr_u8x16)b);
}
APR_SIMD v128_t wasm_i32x4_add(v128_t a, v128_t b) { return (v128_t)((apr_u32x4)a + (apr_u32x4)b); }
APR_SIMD v128_t wasm_i32x4_sub(v128_t a, v128_t b) { return (v128_t)((apr_u32x4)a - (apr_u32x4)b); }
APR_SIMD v128_t wasm_u8x16_shr(v128_t a, uint32_t n) { return (v128_t)((apr_u8x16)a >> (n & 7)); }
APR_SIMD v128_t wasm_i8x16_shl(v128_t a, uint32_t n) { return (v128_t)((apr_u8x16)a << (n & 7)); }
APR_SIMD v128_t wasm_i32x4_shl(v128_t a, uint32_t n) { return (v128_t)((apr_u32x4)a << (n & 31)); }
APR_SIMD v128_t wasm_i8x16_eq(v128_t a, v128_t b) { return (v128_t)((apr_i8x16)a == (apr_i8x16)b); }
APR_SIMD v128_t wasm_i32x4_eq(v128_t a, v128_t b) { return (v128_t)(a == b); }

/* Lane i of the result: a's byte idx[i] when idx[i] < 16, else 0. */
APR_SIMD v128_t wasm_i8x16_swizzle(v128_t a, v128_t idx) {
#if defined(__SSSE3__)
  /* indices 16..255 saturate to >= 128, which pshufb turns into 0 */
  return (v128_t)_mm_shuffle_epi8((__m128i)a, _mm_adds_epu8((__m128i)idx, _mm_set1_epi8(0x70)));
#else
  apr_u8x16 bytes = (apr_u8x16)a, at = (apr_u8x16)idx, out;
  for (int i = 0; i < 16; i++) out[i] = at[i] < 16 ? bytes[at[i]] : 0;
  return (v128_t)out;
#endif
}

/* Widening and saturating narrowing. */
APR_SIMD v128_t wasm_i16x8_extend_low_i8x16(v128_t a) {
  apr_i8x16 b = (apr_i8x16)a;
  return (v128_t)__builtin_convertvector(__builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7),
                                         apr_i16x8);
}
APR_SIMD v128_t wasm_i16x8_extend_high_i8x16(v128_t a) {
  apr_i8x16 b = (apr_i8x16)a;
  return (v128_t)__builtin_convertvector(
      __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15), apr_i16x8);
}
APR_SIMD v128_t wasm_i16x8_narrow_i32x4(v128_t a, v128_t b) {
#if defined(__SSSE3__)
  return (v128_t)_mm_packs_epi32((__m128i)a, (__m128i)b);
#else
  apr_i16x8 out;
  for (int i = 0; i < 8; i++) {
    int32_t v = i < 4 ? a[i] : b[i - 4];
    out[i] = (int16_t)(v < -32768 ? -32768 : v > 32767 ? 32767 : v);
  }
  return (v128_t)out;
#endif
}
APR_SIMD v128_t wasm_i8x16_narrow_i16x8(v128_t a, v128_t b) {
#if defined(__SSSE3__)
  return (v128_t)_mm_packs_epi16((__m128i)a, (__m128i)b);
#else
  apr_i8x16 out;
  apr_i16x8 x = (apr_i16x8)a, y = (apr_i16x8)b;
  for (int i = 0; i < 16; i++) {
    int16_t v = i < 8 ? x[i] : y[i - 8];
    out[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
  }
  return (v128_t)out;
#endif
}

/* Float lanes. */
APR_SIMD v128_t wasm_f32x4_add(v128_t a, v128_t b) { return (v128_t)((apr_f32x4)a + (apr_f32x4)b); }
APR_SIMD v128_t wasm_f32x4_sub(v128_t a, v128_t b) { return (v128_t)((apr_f32x4)a - (apr_f32x4)b); }
APR_SIMD v128_t wasm_f32x4_mul(v128_t a, v128_t b) { return (v128_t)((apr_f32x4)a * (apr_f32x4)b); }
APR_SIMD v128_t wasm_f32x4_convert_i32x4(v128_t a) {
  return (v128_t)__builtin_convertvector(a, apr_f32x4);
}
/* Round to nearest, ties to even (the default rounding mode's rint). */
APR_SIMD v128_t wasm_f32x4_nearest(v128_t a) {
  apr_f32x4 f = (apr_f32x4)a;
  for (int i = 0; i < 4; i++) f[i] = __builtin_rintf(f[i]);
  return (v128_t)f;
}
/* Truncation toward zero, saturating; NaN becomes 0. */
APR_SIMD v128_t wasm_i32x4_trunc_sat_f32x4(v128_t a) {
  apr_f32x4 f = (apr_f32x4)a;
  v128_t out;
  for (int i = 0; i < 4; i++) {
    float v = f[i];
    out[i] = v != v ? 0 : v >= 2147483648.0f ? INT32_MAX : v < -2147483648.0f ? INT32_MIN
                                                                                : (int32_t)v;
  }
  return out;
}

/* Dot products. i32x4.dot_i16x8_s: lane i = a[2i] b[2i] + a[2i+1] b[2i+1] (wrapping). */
APR_SIMD v128_t wasm_i32x4_dot_i16x8(v128_t a, v128_t b) {
#if defined(__SSSE3__)
  return (v128_t)_mm_madd_epi16((__m128i)a, (__m128i)b);
#else
  apr_i16x8 x = (apr_i16x8)a, y = (apr_i16x8)b;
  v128_t out;
  for (int i = 0; i < 4; i++) {
    out[i] = (int32_t)((uint32_t)(x[2 * i] * y[2 * i]) + (uint32_t)(x[2 * i + 1] * y[2 * i + 1]));
  }
  return out;
#endif
}
/* Relaxed: lane i = c[i] + sum over j < 4 of a[4i+j] b[4i+j], a signed bytes, b 7-bit
 * (0..127: every relaxed implementation then computes this exactly; the kernels pass only such b). */
APR_SIMD v128_t wasm_i32x4_relaxed_dot_i8x16_i7x16_add(v128_t a, v128_t b, v128_t c) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return (v128_t)_mm_dpbusd_epi32((__m128i)c, (__m128i)b, (__m128i)a);
#elif defined(__SSSE3__)
  __m128i pairs = _mm_maddubs_epi16((__m128i)b, (__m128i)a);     /* |sum| <= 2 * 127 * 127 */
  return (v128_t)_mm_add_epi32((__m128i)c, _mm_madd_epi16(pairs, _mm_set1_epi16(1)));
#else
  apr_i8x16 x = (apr_i8x16)a, y = (apr_i8x16)b;
  v128_t out = c;
  for (int i = 0; i < 16; i++) out[i / 4] += (int32_t)x[i] * (int32_t)y[i];
  return out;
#endif
}
#endif
