/*
 * exp and Whisper's exact-erf GELU on four float32 lanes, every step a float32 operation
 * (no FMA: WebAssembly has none and the kernels are built with -ffp-contract=off), so a
 * float32 numpy replay of the same steps equals them bit for bit
 * (wasm_tests/test_attend_kernel.py). Included by attend_f32.c.
 *
 * exp: Cephes' expf. n = floor(x log2(e) + 1/2), r = x - n C1 - n C2 (C1 + C2 = ln 2, C1
 * exact in few bits), exp(r) by a degree-5 polynomial, times 2^n built in the exponent
 * field; x is clamped to [-88.376, 88.376] (below: 2^-127 rounds to 0 in the exponent
 * field). Within 2 ulp of exp over the softmax's range (x <= 0).
 */
#ifndef EXP_F32_H
#define EXP_F32_H
#include <wasm_simd128.h>

#define INLINE static inline __attribute__((always_inline))

INLINE v128_t exp_f32x4(v128_t x) {
  x = wasm_f32x4_min(x, wasm_f32x4_splat(88.3762626647949f));
  x = wasm_f32x4_max(x, wasm_f32x4_splat(-88.3762626647949f));
  v128_t n = wasm_f32x4_floor(wasm_f32x4_add(wasm_f32x4_mul(x, wasm_f32x4_splat(1.44269504088896341f)),
                                             wasm_f32x4_splat(0.5f)));
  x = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(0.693359375f)));
  x = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(-2.12194440e-4f)));
  v128_t z = wasm_f32x4_mul(x, x);
  v128_t y = wasm_f32x4_splat(1.9875691500e-4f);
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), wasm_f32x4_splat(1.3981999507e-3f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), wasm_f32x4_splat(8.3334519073e-3f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), wasm_f32x4_splat(4.1665795894e-2f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), wasm_f32x4_splat(1.6666665459e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), wasm_f32x4_splat(5.0000001201e-1f));
  y = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(y, z), x), wasm_f32x4_splat(1.0f));
  v128_t e = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
  return wasm_f32x4_mul(y, e);
}

/* (erf(x / sqrt 2) + 1) x 0.5, in whisper_math's order, erf by Abramowitz & Stegun 7.1.26 as
 * apr_core/speech/whisper_math.py computes it: z = |x / sqrt 2|, t = 1 / (1 + p z),
 * erf = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), signed as x. */
INLINE v128_t gelu_f32x4(v128_t x) {
  v128_t z = wasm_f32x4_abs(wasm_f32x4_mul(x, wasm_f32x4_splat(0.70710678118654752f)));
  v128_t one = wasm_f32x4_splat(1.0f);
  v128_t t = wasm_f32x4_div(one, wasm_f32x4_add(wasm_f32x4_mul(z, wasm_f32x4_splat(0.3275911f)), one));
  v128_t p = wasm_f32x4_mul(t, wasm_f32x4_splat(1.061405429f));
  p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(-1.453152027f)), t);
  p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(1.421413741f)), t);
  p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(-0.284496736f)), t);
  p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(0.254829592f)), t);
  v128_t erf = wasm_f32x4_sub(one, wasm_f32x4_mul(p, exp_f32x4(wasm_f32x4_neg(wasm_f32x4_mul(z, z)))));
  erf = wasm_v128_bitselect(wasm_f32x4_neg(erf), erf, wasm_f32x4_lt(x, wasm_f32x4_splat(0.0f)));
  return wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_add(erf, one), x), wasm_f32x4_splat(0.5f));
}

#endif
