;; crc32: a kernel (seed 004 "Kernel ABI") computing the CRC-32 (IEEE 802.3, as zlib/gzip/PNG)
;; of its input and returning it as 8 lowercase hex digits.
;;
;; ABI: the host writes the input at IN_OFF (65536), calls process(in_len), and reads
;; out_len (= 8) bytes at OUT_OFF (8454144). Inputs up to 8 MiB fit between the two.
;; The 1 KiB lookup table at 0 is built on the first call and kept (instantiate once).
(module
  (memory (export "memory") 130)
  (global $ready (mut i32) (i32.const 0))

  (func $init
    (local $n i32) (local $c i32) (local $k i32)
    (loop $outer
      (local.set $c (local.get $n))
      (local.set $k (i32.const 8))
      (loop $inner
        (local.set $c
          (if (result i32) (i32.and (local.get $c) (i32.const 1))
            (then (i32.xor (i32.const 0xEDB88320) (i32.shr_u (local.get $c) (i32.const 1))))
            (else (i32.shr_u (local.get $c) (i32.const 1)))))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br_if $inner (local.get $k)))
      (i32.store (i32.shl (local.get $n) (i32.const 2)) (local.get $c))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $outer (i32.lt_u (local.get $n) (i32.const 256))))
    (global.set $ready (i32.const 1)))

  (func (export "process") (param $len i32) (result i32)
    (local $crc i32) (local $p i32) (local $end i32) (local $i i32) (local $d i32)
    (if (i32.eqz (global.get $ready)) (then (call $init)))
    (local.set $crc (i32.const -1))
    (local.set $p (i32.const 65536))
    (local.set $end (i32.add (local.get $p) (local.get $len)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $crc
          (i32.xor
            (i32.load
              (i32.shl
                (i32.and (i32.xor (local.get $crc) (i32.load8_u (local.get $p))) (i32.const 255))
                (i32.const 2)))
            (i32.shr_u (local.get $crc) (i32.const 8))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (local.set $crc (i32.xor (local.get $crc) (i32.const -1)))
    (loop $hex
      (local.set $d
        (i32.and
          (i32.shr_u (local.get $crc) (i32.sub (i32.const 28) (i32.shl (local.get $i) (i32.const 2))))
          (i32.const 15)))
      (i32.store8 offset=8454144 (local.get $i)
        (i32.add (local.get $d)
          (select (i32.const 48) (i32.const 87) (i32.lt_u (local.get $d) (i32.const 10)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $hex (i32.lt_u (local.get $i) (i32.const 8))))
    (i32.const 8))
)
