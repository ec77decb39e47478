;; y[t, r] = dot(W[r, :], x[t, :]) for a float32 W [rows, cols] (row-major) and x [T, cols],
;; with 128-bit SIMD: four independent f32x4 accumulators per row, so consecutive
;; multiply-adds do not wait on each other (cols must be a multiple of 16).
;; The browser shell's kernel behind apr_core's "matmul" registry entry: numpy in Pyodide has
;; no BLAS and no SIMD. Build: scripts/build_wasm_kernels.py (embeds the binary in
;; matmul_f32.wasm.js, which a test keeps in sync with this file).
(module
  (import "env" "memory" (memory 1))
  (func (export "matmul")
    (param $w i32) (param $x i32) (param $y i32) (param $rows i32) (param $cols i32) (param $T i32)
    (local $t i32) (local $r i32) (local $k i32) (local $wp i32) (local $xp i32) (local $yp i32)
    (local $x0 i32) (local $a v128) (local $b v128) (local $c v128) (local $d v128)
    (local.set $yp (local.get $y))
    (block $t_done (loop $t_loop
      (br_if $t_done (i32.ge_u (local.get $t) (local.get $T)))
      (local.set $x0 (i32.add (local.get $x)
                              (i32.mul (local.get $t) (i32.shl (local.get $cols) (i32.const 2)))))
      (local.set $wp (local.get $w))
      (local.set $r (i32.const 0))
      (block $r_done (loop $r_loop
        (br_if $r_done (i32.ge_u (local.get $r) (local.get $rows)))
        (local.set $a (f32x4.splat (f32.const 0)))
        (local.set $b (f32x4.splat (f32.const 0)))
        (local.set $c (f32x4.splat (f32.const 0)))
        (local.set $d (f32x4.splat (f32.const 0)))
        (local.set $xp (local.get $x0))
        (local.set $k (i32.const 0))
        (block $k_done (loop $k_loop
          (br_if $k_done (i32.ge_u (local.get $k) (local.get $cols)))
          (local.set $a (f32x4.add (local.get $a)
            (f32x4.mul (v128.load (local.get $wp)) (v128.load (local.get $xp)))))
          (local.set $b (f32x4.add (local.get $b)
            (f32x4.mul (v128.load offset=16 (local.get $wp)) (v128.load offset=16 (local.get $xp)))))
          (local.set $c (f32x4.add (local.get $c)
            (f32x4.mul (v128.load offset=32 (local.get $wp)) (v128.load offset=32 (local.get $xp)))))
          (local.set $d (f32x4.add (local.get $d)
            (f32x4.mul (v128.load offset=48 (local.get $wp)) (v128.load offset=48 (local.get $xp)))))
          (local.set $wp (i32.add (local.get $wp) (i32.const 64)))
          (local.set $xp (i32.add (local.get $xp) (i32.const 64)))
          (local.set $k (i32.add (local.get $k) (i32.const 16)))
          (br $k_loop)))
        (local.set $a (f32x4.add (f32x4.add (local.get $a) (local.get $b))
                                 (f32x4.add (local.get $c) (local.get $d))))
        (f32.store (local.get $yp)
          (f32.add (f32.add (f32x4.extract_lane 0 (local.get $a)) (f32x4.extract_lane 1 (local.get $a)))
                   (f32.add (f32x4.extract_lane 2 (local.get $a)) (f32x4.extract_lane 3 (local.get $a)))))
        (local.set $yp (i32.add (local.get $yp) (i32.const 4)))
        (local.set $r (i32.add (local.get $r) (i32.const 1)))
        (br $r_loop)))
      (local.set $t (i32.add (local.get $t) (i32.const 1)))
      (br $t_loop)))))
