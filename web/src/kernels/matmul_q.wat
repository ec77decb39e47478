;; Quantized matmuls over GGUF blocks: y[t, r] = dot(W[r, :], x[t, :]) for Q4_1 and Q8_0
;; weights kept at their stored size (4.5 and 8.5 bits a weight instead of float32's 32), so a
;; decode step streams ~100 MB through the kernel instead of ~540 MB.
;;
;; Math (the accuracy argument is in apr_webkernel.py): every 32-column block of x is scaled
;; by dx = max|x| / 32767 and written as two int16 terms, x ~ dx * (xh + xl / 32768) (about
;; 30 bits: float32's own precision), so the integer codes q meet x in `i32x4.dot_i16x8_s`.
;; Per block and row:  s = f32(sum q*xh) + f32(sum q*xl) * 2^-15
;;                     acc += s * (d * dx)          (Q4_1 also: macc += m * sum(x))
;; Each lane of the accumulators is one row: weights are repacked at upload (apr_webkernel)
;; so four rows' codes for the same column pair sit side by side, [r0 k, r0 k+1, r1 k, ...],
;; and one splatted x pair meets all four in a single dot: no horizontal sums, one v128 store
;; per four outputs. No FMA (WebAssembly has none): results are reproducible bit for bit.
;;
;; Memory is imported: it is the f32 kernel's (matmul_f32.wat), so both see the same weights
;; and scratch. Build: scripts/build_wasm_kernels.py.
;;
;; Layouts (little-endian, all offsets in bytes):
;;   xq [T, nb, 128]: per block 32 int16 xh, then 32 int16 xl
;;   sc [T, nb, 2] f32: per block dx, then sum(x) (summed in column order)
;;   Q4_1 record [groups, nb, 96]: 64 B of nibbles, then d[4] f32, then m[4] f32. Byte
;;     vector i (16 B) holds column pairs 4i, 4i+1 in its low nibbles (bytes 0-7, 8-15)
;;     and pairs 4i+2, 4i+3 in its high nibbles.
;;   Q8_0 record [groups, nb, 144]: 128 int8 codes, pair p at bytes 8p..8p+7, then d[4] f32.
;;   y [T, 4 * groups] f32.
;; pack_q4_1 / pack_q8_0 build the records from the GGUF blocks [rows, nb, 20 | 34] once, at
;; upload (f16 scales widened exactly, as numpy's astype does).
(module
  (import "env" "memory" (memory 1))

  ;; IEEE half bits -> float32, exactly (subnormals, infinities and NaN payloads included).
  (func $half (param $h i32) (result f32)
    (local $e i32) (local $m i32) (local $s i32)
    (local.set $s (i32.shl (i32.and (local.get $h) (i32.const 0x8000)) (i32.const 16)))
    (local.set $e (i32.and (i32.shr_u (local.get $h) (i32.const 10)) (i32.const 31)))
    (local.set $m (i32.and (local.get $h) (i32.const 0x3ff)))
    (if (result f32) (i32.eqz (local.get $e))
      (then (f32.copysign (f32.mul (f32.convert_i32_u (local.get $m)) (f32.const 0x1p-24))
                          (f32.reinterpret_i32 (local.get $s))))
      (else (f32.reinterpret_i32 (i32.or (i32.or (local.get $s) (i32.shl (local.get $m) (i32.const 13)))
        (select (i32.const 0x7f800000) (i32.shl (i32.add (local.get $e) (i32.const 112)) (i32.const 23))
                (i32.eq (local.get $e) (i32.const 31))))))))

  ;; Column of pair-major code index F (pair F>>3, row (F>>1)&3, element F&1): 2*(F>>3) + (F&1).
  (func $column (param $F i32) (result i32)
    (i32.or (i32.shl (i32.shr_u (local.get $F) (i32.const 3)) (i32.const 1))
            (i32.and (local.get $F) (i32.const 1))))

  ;; The block of code F's row: row (F>>1)&3 of the group whose row 0 block is at `blk`.
  (func $row_block (param $blk i32) (param $stride i32) (param $F i32) (result i32)
    (i32.add (local.get $blk) (i32.mul (i32.and (i32.shr_u (local.get $F) (i32.const 1)) (i32.const 3))
                                       (local.get $stride))))

  ;; Q4_1 code F (0..15): column k < 16 is the low nibble of qs[k], else the high one of qs[k-16].
  (func $q4_code (param $blk i32) (param $stride i32) (param $F i32) (result i32)
    (local $k i32)
    (local.set $k (call $column (local.get $F)))
    (i32.and (i32.shr_u (i32.load8_u offset=4 (i32.add (call $row_block (local.get $blk) (local.get $stride) (local.get $F))
                                                       (i32.and (local.get $k) (i32.const 15))))
                        (i32.shl (i32.shr_u (local.get $k) (i32.const 4)) (i32.const 2)))
             (i32.const 15)))

  ;; Four rows' f16 field at `offset` of their blocks -> float32 x 4 at `dst`.
  (func $scales (param $blk i32) (param $stride i32) (param $offset i32) (param $dst i32)
    (local $r i32)
    (block $done (loop $rows
      (br_if $done (i32.ge_u (local.get $r) (i32.const 4)))
      (f32.store (i32.add (local.get $dst) (i32.shl (local.get $r) (i32.const 2)))
        (call $half (i32.load16_u (i32.add (i32.add (local.get $blk) (local.get $offset))
                                           (i32.mul (local.get $r) (local.get $stride))))))
      (local.set $r (i32.add (local.get $r) (i32.const 1)))
      (br $rows))))

  ;; GGUF blocks `src` [rows, nb, width] -> records `dst` [rows/4, nb, record]: `kind` 1 is
  ;; Q4_1 (width 20, record 96), 2 is Q8_0 (width 34, record 144); layouts at the top.
  (func (export "pack") (param $kind i32) (param $src i32) (param $dst i32) (param $rows i32)
    (param $nb i32)
    (local $width i32) (local $stride i32) (local $n i32) (local $b i32) (local $blk i32)
    (local $f i32) (local $F i32)
    (local.set $width (select (i32.const 20) (i32.const 34) (i32.eq (local.get $kind) (i32.const 1))))
    (local.set $stride (i32.mul (local.get $nb) (local.get $width)))
    (local.set $n (i32.shr_u (local.get $rows) (i32.const 2)))
    (block $g_done (loop $g_loop
      (br_if $g_done (i32.eqz (local.get $n)))
      (local.set $b (i32.const 0))
      (block $b_done (loop $b_loop
        (br_if $b_done (i32.ge_u (local.get $b) (local.get $nb)))
        (local.set $blk (i32.add (local.get $src) (i32.mul (local.get $b) (local.get $width))))
        (local.set $f (i32.const 0))
        (if (i32.eq (local.get $kind) (i32.const 1))
          (then
            (block $f_done (loop $f_loop  ;; byte j of vector i: codes 32i+j (low), 32i+16+j (high)
              (br_if $f_done (i32.ge_u (local.get $f) (i32.const 64)))
              (local.set $F (i32.add (i32.shl (i32.shr_u (local.get $f) (i32.const 4)) (i32.const 5))
                                     (i32.and (local.get $f) (i32.const 15))))
              (i32.store8 (i32.add (local.get $dst) (local.get $f))
                (i32.or (call $q4_code (local.get $blk) (local.get $stride) (local.get $F))
                        (i32.shl (call $q4_code (local.get $blk) (local.get $stride)
                                                (i32.add (local.get $F) (i32.const 16)))
                                 (i32.const 4))))
              (local.set $f (i32.add (local.get $f) (i32.const 1)))
              (br $f_loop)))
            (call $scales (local.get $blk) (local.get $stride) (i32.const 0) (i32.add (local.get $dst) (i32.const 64)))
            (call $scales (local.get $blk) (local.get $stride) (i32.const 2) (i32.add (local.get $dst) (i32.const 80)))
            (local.set $dst (i32.add (local.get $dst) (i32.const 96))))
          (else
            (block $f_done (loop $f_loop  ;; code F: int8 qs[column] of its row's block
              (br_if $f_done (i32.ge_u (local.get $f) (i32.const 128)))
              (i32.store8 (i32.add (local.get $dst) (local.get $f))
                (i32.load8_u offset=2 (i32.add (call $row_block (local.get $blk) (local.get $stride) (local.get $f))
                                               (call $column (local.get $f)))))
              (local.set $f (i32.add (local.get $f) (i32.const 1)))
              (br $f_loop)))
            (call $scales (local.get $blk) (local.get $stride) (i32.const 0) (i32.add (local.get $dst) (i32.const 128)))
            (local.set $dst (i32.add (local.get $dst) (i32.const 144)))))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (br $b_loop)))
      (local.set $src (i32.add (local.get $src) (i32.shl (local.get $stride) (i32.const 2))))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $g_loop))))

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

  ;; Q4_1 records `w` [groups, nb, 96] times quantized x -> y [T, 4 * groups].
  (func (export "q4_1")
    (param $w i32) (param $xq i32) (param $sc i32) (param $y i32)
    (param $groups i32) (param $nb i32) (param $T i32)
    (local $g i32) (local $t i32) (local $b i32) (local $i i32) (local $wg i32) (local $wp i32)
    (local $xp i32) (local $sp i32) (local $yp i32)
    (local $v v128) (local $lo v128) (local $hi v128) (local $e v128)
    (local $ih v128) (local $il v128) (local $acc v128) (local $macc v128)
    (local.set $wg (local.get $w))
    (block $g_done (loop $g_loop
      (br_if $g_done (i32.ge_u (local.get $g) (local.get $groups)))
      (local.set $t (i32.const 0))
      (block $t_done (loop $t_loop
        (br_if $t_done (i32.ge_u (local.get $t) (local.get $T)))
        (local.set $wp (local.get $wg))
        (local.set $xp (i32.add (local.get $xq)
                                (i32.shl (i32.mul (local.get $t) (local.get $nb)) (i32.const 7))))
        (local.set $sp (i32.add (local.get $sc)
                                (i32.shl (i32.mul (local.get $t) (local.get $nb)) (i32.const 3))))
        (local.set $acc (v128.const i32x4 0 0 0 0))
        (local.set $macc (v128.const i32x4 0 0 0 0))
        (local.set $b (i32.const 0))
        (block $b_done (loop $b_loop
          (br_if $b_done (i32.ge_u (local.get $b) (local.get $nb)))
          (local.set $ih (v128.const i32x4 0 0 0 0))
          (local.set $il (v128.const i32x4 0 0 0 0))
          (local.set $i (i32.const 0))
          (block $i_done (loop $i_loop  ;; byte vector i: column pairs 4i .. 4i+3
            (br_if $i_done (i32.ge_u (local.get $i) (i32.const 64)))
            (local.set $v (v128.load (i32.add (local.get $wp) (local.get $i))))
            (local.set $lo (v128.and (local.get $v) (v128.const i8x16 15 15 15 15 15 15 15 15
                                                                     15 15 15 15 15 15 15 15)))
            (local.set $hi (i8x16.shr_u (local.get $v) (i32.const 4)))
            (local.set $e (i16x8.extend_low_i8x16_u (local.get $lo)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat (i32.add (local.get $xp) (local.get $i))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=64 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $e (i16x8.extend_high_i8x16_u (local.get $lo)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=4 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=68 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $e (i16x8.extend_low_i8x16_u (local.get $hi)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=8 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=72 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $e (i16x8.extend_high_i8x16_u (local.get $hi)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=12 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=76 (i32.add (local.get $xp) (local.get $i))))))
            (local.set $i (i32.add (local.get $i) (i32.const 16)))
            (br $i_loop)))
          ;; acc += (f32(ih) + f32(il) * 2^-15) * (d * dx);  macc += m * sum(x)
          (local.set $acc (f32x4.add (local.get $acc) (f32x4.mul
            (f32x4.add (f32x4.convert_i32x4_s (local.get $ih))
                       (f32x4.mul (f32x4.convert_i32x4_s (local.get $il))
                                  (v128.const f32x4 0x1p-15 0x1p-15 0x1p-15 0x1p-15)))
            (f32x4.mul (v128.load offset=64 (local.get $wp)) (v128.load32_splat (local.get $sp))))))
          (local.set $macc (f32x4.add (local.get $macc)
            (f32x4.mul (v128.load offset=80 (local.get $wp)) (v128.load32_splat offset=4 (local.get $sp)))))
          (local.set $wp (i32.add (local.get $wp) (i32.const 96)))
          (local.set $xp (i32.add (local.get $xp) (i32.const 128)))
          (local.set $sp (i32.add (local.get $sp) (i32.const 8)))
          (local.set $b (i32.add (local.get $b) (i32.const 1)))
          (br $b_loop)))
        ;; y[t, 4g .. 4g+3]
        (v128.store (i32.add (local.get $y) (i32.shl (i32.add (i32.mul (local.get $t) (local.get $groups))
                                                               (local.get $g)) (i32.const 4)))
                    (f32x4.add (local.get $acc) (local.get $macc)))
        (local.set $t (i32.add (local.get $t) (i32.const 1)))
        (br $t_loop)))
      (local.set $wg (local.get $wp))
      (local.set $g (i32.add (local.get $g) (i32.const 1)))
      (br $g_loop))))

  ;; Q8_0 records `w` [groups, nb, 144] times quantized x -> y [T, 4 * groups].
  (func (export "q8_0")
    (param $w i32) (param $xq i32) (param $sc i32) (param $y i32)
    (param $groups i32) (param $nb i32) (param $T i32)
    (local $g i32) (local $t i32) (local $b i32) (local $i i32) (local $wg i32) (local $wp i32)
    (local $xp i32) (local $sp i32) (local $q i32) (local $v v128) (local $e v128)
    (local $ih v128) (local $il v128) (local $acc v128)
    (local.set $wg (local.get $w))
    (block $g_done (loop $g_loop
      (br_if $g_done (i32.ge_u (local.get $g) (local.get $groups)))
      (local.set $t (i32.const 0))
      (block $t_done (loop $t_loop
        (br_if $t_done (i32.ge_u (local.get $t) (local.get $T)))
        (local.set $wp (local.get $wg))
        (local.set $xp (i32.add (local.get $xq)
                                (i32.shl (i32.mul (local.get $t) (local.get $nb)) (i32.const 7))))
        (local.set $sp (i32.add (local.get $sc)
                                (i32.shl (i32.mul (local.get $t) (local.get $nb)) (i32.const 3))))
        (local.set $acc (v128.const i32x4 0 0 0 0))
        (local.set $b (i32.const 0))
        (block $b_done (loop $b_loop
          (br_if $b_done (i32.ge_u (local.get $b) (local.get $nb)))
          (local.set $ih (v128.const i32x4 0 0 0 0))
          (local.set $il (v128.const i32x4 0 0 0 0))
          (local.set $i (i32.const 0))
          (block $i_done (loop $i_loop  ;; bytes 32i/2 ..: column pairs 4i' .. 4i'+3
            (br_if $i_done (i32.ge_u (local.get $i) (i32.const 128)))
            (local.set $q (i32.shr_u (local.get $i) (i32.const 1)))  ;; x offset of pair i/8
            (local.set $v (v128.load (i32.add (local.get $wp) (local.get $i))))
            (local.set $e (i16x8.extend_low_i8x16_s (local.get $v)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat (i32.add (local.get $xp) (local.get $q))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=64 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $e (i16x8.extend_high_i8x16_s (local.get $v)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=4 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=68 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $v (v128.load offset=16 (i32.add (local.get $wp) (local.get $i))))
            (local.set $e (i16x8.extend_low_i8x16_s (local.get $v)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=8 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=72 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $e (i16x8.extend_high_i8x16_s (local.get $v)))
            (local.set $ih (i32x4.add (local.get $ih) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=12 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $il (i32x4.add (local.get $il) (i32x4.dot_i16x8_s (local.get $e)
              (v128.load32_splat offset=76 (i32.add (local.get $xp) (local.get $q))))))
            (local.set $i (i32.add (local.get $i) (i32.const 32)))
            (br $i_loop)))
          ;; acc += (f32(ih) + f32(il) * 2^-15) * (d * dx)
          (local.set $acc (f32x4.add (local.get $acc) (f32x4.mul
            (f32x4.add (f32x4.convert_i32x4_s (local.get $ih))
                       (f32x4.mul (f32x4.convert_i32x4_s (local.get $il))
                                  (v128.const f32x4 0x1p-15 0x1p-15 0x1p-15 0x1p-15)))
            (f32x4.mul (v128.load offset=128 (local.get $wp)) (v128.load32_splat (local.get $sp))))))
          (local.set $wp (i32.add (local.get $wp) (i32.const 144)))
          (local.set $xp (i32.add (local.get $xp) (i32.const 128)))
          (local.set $sp (i32.add (local.get $sp) (i32.const 8)))
          (local.set $b (i32.add (local.get $b) (i32.const 1)))
          (br $b_loop)))
        (v128.store (i32.add (local.get $y) (i32.shl (i32.add (i32.mul (local.get $t) (local.get $groups))
                                                               (local.get $g)) (i32.const 4)))
                    (local.get $acc))
        (local.set $t (i32.add (local.get $t) (i32.const 1)))
        (br $t_loop)))
      (local.set $wg (local.get $wp))
      (local.set $g (i32.add (local.get $g) (i32.const 1)))
      (br $g_loop)))))
