;; The checksum toolkit's CRC-32 transform as an Extism plugin (for bench/kernel.py):
;; the same table-driven loop as toolkits/checksum/src/crc32.wat, with Extism's ABI —
;; input read through extism:host/env input_load_u64/u8, output through alloc/store/output_set.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
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

  (func (export "crc32") (result i32)
    (local $len i64) (local $i i64) (local $crc i32) (local $p i32) (local $end i32) (local $d i32)
    (local $j i32) (local $out i64)
    (if (i32.eqz (global.get $ready)) (then (call $init)))
    (local.set $len (call $input_length))
    (if (i64.gt_u (local.get $len) (i64.const 8388608)) (then (return (i32.const 1))))
    (block $w8 (loop $l8
      (br_if $w8 (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $len)))
      (i64.store offset=65536 (i32.wrap_i64 (local.get $i)) (call $input_load_u64 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 8)))
      (br $l8)))
    (block $w1 (loop $l1
      (br_if $w1 (i64.ge_u (local.get $i) (local.get $len)))
      (i32.store8 offset=65536 (i32.wrap_i64 (local.get $i)) (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $l1)))
    (local.set $crc (i32.const -1))
    (local.set $p (i32.const 65536))
    (local.set $end (i32.add (local.get $p) (i32.wrap_i64 (local.get $len))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $crc
          (i32.xor
            (i32.load (i32.shl (i32.and (i32.xor (local.get $crc) (i32.load8_u (local.get $p))) (i32.const 255)) (i32.const 2)))
            (i32.shr_u (local.get $crc) (i32.const 8))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (local.set $crc (i32.xor (local.get $crc) (i32.const -1)))
    (local.set $out (call $alloc (i64.const 8)))
    (loop $hex
      (local.set $d (i32.and (i32.shr_u (local.get $crc) (i32.sub (i32.const 28) (i32.shl (local.get $j) (i32.const 2)))) (i32.const 15)))
      (call $store_u8 (i64.add (local.get $out) (i64.extend_i32_u (local.get $j)))
        (i32.add (local.get $d) (select (i32.const 48) (i32.const 87) (i32.lt_u (local.get $d) (i32.const 10)))))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (br_if $hex (i32.lt_u (local.get $j) (i32.const 8))))
    (call $output_set (local.get $out) (i64.const 8))
    (i32.const 0))
)
