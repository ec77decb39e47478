;; The activation split of the browser shell's quantized matmuls (matmul_k.c): every 32-column
;; block of x is scaled by dx = max|x| / 32767 and written as two int16 terms,
;; x ~ dx * (xh + xl / 32768) (about 30 bits: float32's own precision), so the weights'
;; integer codes meet x in exact `i32x4.dot_i16x8_s` sums (the accuracy argument is in
;; apr_webkernel.py).
;;
;; Memory is imported: it is the f32 kernel's (matmul_f32.wat), shared with matmul_k.c.
;; Build: scripts/build_wasm_kernels.py.
;;
;; Layouts (little-endian, all offsets in bytes):
;;   xq [T, nb, 128]: per block 32 int16 xh, then 32 int16 xl
;;   sc [T, nb, 2] f32: per block dx, then sum(x) (summed in column order)
(module
  (import "env" "memory" (memory 1))
  ;; x [T, nb * 32] f32 -> xq and sc (layouts above).
  (func (export "quantize_x")
    (param $x i32) (param $nb i32) (param $T i32) (param $xq i32) (param $sc i32)
    (local $n i32) (local $k i32) (local $p i32) (local $v f32) (local $amax f32)
    (local $sum f32) (local $inv f32) (local $xs f32) (local $xh f32)
    (local.set $n (i32.mul (local.get $nb) (local.get $T)))
    (block $done (loop $blocks
      (br_if $done (i32.eqz (local.get $n)))
      (local.set $amax (f32.const 0))
      (local.set $sum (f32.const 0))
      (local.set $k (i32.const 0))
      (block $k_done (loop $k_loop
        (br_if $k_done (i32.ge_u (local.get $k) (i32.const 128)))
        (local.set $v (f32.load (i32.add (local.get $x) (local.get $k))))
        (local.set $amax (f32.max (local.get $amax) (f32.abs (local.get $v))))
        (local.set $sum (f32.add (local.get $sum) (local.get $v)))
        (local.set $k (i32.add (local.get $k) (i32.const 4)))
        (br $k_loop)))
      (local.set $inv (select (f32.div (f32.const 32767) (local.get $amax)) (f32.const 0)
                              (f32.gt (local.get $amax) (f32.const 0))))
      (local.set $k (i32.const 0))
      (local.set $p (local.get $xq))
      (block $q_done (loop $q_loop
        (br_if $q_done (i32.ge_u (local.get $k) (i32.const 128)))
        (local.set $xs (f32.mul (f32.load (i32.add (local.get $x) (local.get $k))) (local.get $inv)))
        (local.set $xh (f32.nearest (local.get $xs)))
        (i32.store16 (local.get $p) (i32.trunc_sat_f32_s (local.get $xh)))
        (i32.store16 offset=64 (local.get $p)
          (i32.trunc_sat_f32_s (f32.nearest (f32.mul (f32.sub (local.get $xs) (local.get $xh))
                                                     (f32.const 32768)))))
        (local.set $p (i32.add (local.get $p) (i32.const 2)))
        (local.set $k (i32.add (local.get $k) (i32.const 4)))
        (br $q_loop)))
      (f32.store (local.get $sc) (f32.div (local.get $amax) (f32.const 32767)))
      (f32.store offset=4 (local.get $sc) (local.get $sum))
      (local.set $x (i32.add (local.get $x) (i32.const 128)))
      (local.set $xq (i32.add (local.get $xq) (i32.const 128)))
      (local.set $sc (i32.add (local.get $sc) (i32.const 8)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $blocks))))

)
