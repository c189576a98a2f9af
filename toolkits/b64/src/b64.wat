;; b64: base64 (RFC 4648) encode and decode as a WASI command.
;;
;;   b64 [encode]        stdin bytes → one line of base64 (padded) + "\n"
;;   b64 decode | -d     base64 on stdin (whitespace ignored) → the bytes
;;   b64 --help | -h     usage
;;
;; Exit 0 on success; 1 on invalid input (a message on stderr names the byte offset);
;; 2 on a usage error. Reads all of stdin into linear memory (growing it; the host's
;; memory limit bounds it), decodes in place.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)

  (data (i32.const 0) "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
  (data (i32.const 320) "encode\00")
  (data (i32.const 328) "decode\00")
  (data (i32.const 336) "-d\00")
  (data (i32.const 340) "--decode\00")
  (data (i32.const 352) "-h\00")
  (data (i32.const 356) "--help\00")
  (data (i32.const 368) "usage: b64 [encode|decode] < input\0a  encode (default): bytes -> one line of base64\0a  decode, -d: base64 -> bytes (whitespace ignored)\0a\00")
  (data (i32.const 640) "b64: invalid base64 input at byte \00")
  (data (i32.const 704) "b64: input too large for memory\0a\00")
  (data (i32.const 768) "b64: unknown mode (try: b64 --help)\0a\00")
  (data (i32.const 832) "b64: truncated base64 input\0a\00")
  ;; 960: iovec (ptr, len), 968: byte count; 1024: argc, 1028: argv bytes;
  ;; 2048: argv pointers; 4096: argv strings; 900: decimal scratch; 65536: data

  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $end
      (loop $l
        (br_if $end (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $l)))
    (local.get $n))

  (func $streq (param $a i32) (param $b i32) (result i32)
    (local $c i32)
    (loop $l
      (local.set $c (i32.load8_u (local.get $a)))
      (if (i32.ne (local.get $c) (i32.load8_u (local.get $b))) (then (return (i32.const 0))))
      (if (i32.eqz (local.get $c)) (then (return (i32.const 1))))
      (local.set $a (i32.add (local.get $a) (i32.const 1)))
      (local.set $b (i32.add (local.get $b) (i32.const 1)))
      (br $l))
    (i32.const 0))

  (func $write_all (param $fd i32) (param $ptr i32) (param $len i32) (result i32)
    (local $n i32)
    (block $done
      (loop $again
        (br_if $done (i32.eqz (local.get $len)))
        (i32.store (i32.const 960) (local.get $ptr))
        (i32.store (i32.const 964) (local.get $len))
        (if (call $fd_write (local.get $fd) (i32.const 960) (i32.const 1) (i32.const 968))
          (then (return (i32.const 1))))
        (local.set $n (i32.load (i32.const 968)))
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $n)))
        (local.set $len (i32.sub (local.get $len) (local.get $n)))
        (br $again)))
    (i32.const 0))

  (func $say (param $fd i32) (param $msg i32)
    (drop (call $write_all (local.get $fd) (local.get $msg) (call $strlen (local.get $msg)))))

  (func $die (param $msg i32) (param $code i32)
    (call $say (i32.const 2) (local.get $msg))
    (call $proc_exit (local.get $code)))

  ;; make sure memory reaches byte $end, growing it; dies cleanly at the host's limit
  (func $ensure (param $end i32)
    (local $have i32)
    (local.set $have (i32.shl (memory.size) (i32.const 16)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow (i32.shr_u (i32.add (i32.sub (local.get $end) (local.get $have)) (i32.const 65535)) (i32.const 16)))
              (i32.const -1))
          (then (call $die (i32.const 704) (i32.const 1)))))))

  ;; all of stdin at 65536; returns its length
  (func $read_all (result i32)
    (local $len i32) (local $n i32) (local $room i32)
    (loop $more
      (local.set $room (i32.sub (i32.shl (memory.size) (i32.const 16)) (i32.add (i32.const 65536) (local.get $len))))
      (if (i32.lt_u (local.get $room) (i32.const 65536))
        (then
          (call $ensure (i32.add (i32.add (i32.const 65536) (local.get $len)) (i32.const 1048576)))
          (local.set $room (i32.sub (i32.shl (memory.size) (i32.const 16)) (i32.add (i32.const 65536) (local.get $len))))))
      (i32.store (i32.const 960) (i32.add (i32.const 65536) (local.get $len)))
      (i32.store (i32.const 964) (local.get $room))
      (if (call $fd_read (i32.const 0) (i32.const 960) (i32.const 1) (i32.const 968))
        (then (call $proc_exit (i32.const 1))))
      (local.set $n (i32.load (i32.const 968)))
      (local.set $len (i32.add (local.get $len) (local.get $n)))
      (br_if $more (local.get $n)))
    (local.get $len))

  (func $encode
    (local $len i32) (local $i i32) (local $o i32) (local $out i32) (local $v i32) (local $rest i32)
    (local.set $len (call $read_all))
    (local.set $out (i32.and (i32.add (i32.add (i32.const 65536) (local.get $len)) (i32.const 3)) (i32.const -4)))
    (call $ensure (i32.add (i32.add (local.get $out) (i32.const 8))
                           (i32.mul (i32.div_u (i32.add (local.get $len) (i32.const 2)) (i32.const 3)) (i32.const 4))))
    (local.set $o (local.get $out))
    (local.set $i (i32.const 65536))
    (local.set $rest (i32.add (i32.const 65536) (i32.mul (i32.div_u (local.get $len) (i32.const 3)) (i32.const 3))))
    (block $done
      (loop $triple
        (br_if $done (i32.ge_u (local.get $i) (local.get $rest)))
        (local.set $v (i32.or (i32.or
          (i32.shl (i32.load8_u (local.get $i)) (i32.const 16))
          (i32.shl (i32.load8_u offset=1 (local.get $i)) (i32.const 8)))
          (i32.load8_u offset=2 (local.get $i))))
        (i32.store8 (local.get $o) (i32.load8_u (i32.shr_u (local.get $v) (i32.const 18))))
        (i32.store8 offset=1 (local.get $o) (i32.load8_u (i32.and (i32.shr_u (local.get $v) (i32.const 12)) (i32.const 63))))
        (i32.store8 offset=2 (local.get $o) (i32.load8_u (i32.and (i32.shr_u (local.get $v) (i32.const 6)) (i32.const 63))))
        (i32.store8 offset=3 (local.get $o) (i32.load8_u (i32.and (local.get $v) (i32.const 63))))
        (local.set $i (i32.add (local.get $i) (i32.const 3)))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))
        (br $triple)))
    (local.set $rest (i32.sub (i32.add (i32.const 65536) (local.get $len)) (local.get $i)))
    (if (i32.eq (local.get $rest) (i32.const 1))
      (then
        (local.set $v (i32.shl (i32.load8_u (local.get $i)) (i32.const 16)))
        (i32.store8 (local.get $o) (i32.load8_u (i32.shr_u (local.get $v) (i32.const 18))))
        (i32.store8 offset=1 (local.get $o) (i32.load8_u (i32.and (i32.shr_u (local.get $v) (i32.const 12)) (i32.const 63))))
        (i32.store16 offset=2 (local.get $o) (i32.const 0x3d3d))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))))
    (if (i32.eq (local.get $rest) (i32.const 2))
      (then
        (local.set $v (i32.or
          (i32.shl (i32.load8_u (local.get $i)) (i32.const 16))
          (i32.shl (i32.load8_u offset=1 (local.get $i)) (i32.const 8))))
        (i32.store8 (local.get $o) (i32.load8_u (i32.shr_u (local.get $v) (i32.const 18))))
        (i32.store8 offset=1 (local.get $o) (i32.load8_u (i32.and (i32.shr_u (local.get $v) (i32.const 12)) (i32.const 63))))
        (i32.store8 offset=2 (local.get $o) (i32.load8_u (i32.and (i32.shr_u (local.get $v) (i32.const 6)) (i32.const 63))))
        (i32.store8 offset=3 (local.get $o) (i32.const 0x3d))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))))
    (i32.store8 (local.get $o) (i32.const 10))
    (local.set $o (i32.add (local.get $o) (i32.const 1)))
    (if (call $write_all (i32.const 1) (local.get $out) (i32.sub (local.get $o) (local.get $out)))
      (then (call $proc_exit (i32.const 1)))))

  ;; writes the decimal of $n at 900.. and returns its start
  (func $decimal (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (i32.const 959))
    (i32.store8 (local.get $p) (i32.const 0))
    (loop $d
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $d (local.get $n)))
    (local.get $p))

  (func $bad (param $at i32)
    (call $say (i32.const 2) (i32.const 640))
    (call $say (i32.const 2) (call $decimal (local.get $at)))
    (i32.store8 (i32.const 959) (i32.const 10))
    (drop (call $write_all (i32.const 2) (i32.const 959) (i32.const 1)))
    (call $proc_exit (i32.const 1)))

  (func $decode
    (local $len i32) (local $i i32) (local $end i32) (local $o i32) (local $c i32) (local $v i32)
    (local $acc i32) (local $q i32) (local $pad i32)
    ;; the reverse table at 64..319: 255 = not in the alphabet
    (memory.fill (i32.const 64) (i32.const 255) (i32.const 256))
    (loop $t
      (i32.store8 offset=64 (i32.load8_u (local.get $i)) (local.get $i))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $t (i32.lt_u (local.get $i) (i32.const 64))))
    (local.set $len (call $read_all))
    (local.set $i (i32.const 65536))
    (local.set $end (i32.add (i32.const 65536) (local.get $len)))
    (local.set $o (i32.const 65536))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        ;; whitespace: space, \t, \n, \r
        (br_if $next (i32.or (i32.eq (local.get $c) (i32.const 32))
                             (i32.lt_u (i32.sub (local.get $c) (i32.const 9)) (i32.const 5))))
        (if (i32.eq (local.get $c) (i32.const 61))
          (then (local.set $pad (i32.add (local.get $pad) (i32.const 1))) (br $next)))
        (if (local.get $pad) (then (call $bad (i32.sub (i32.sub (local.get $i) (i32.const 1)) (i32.const 65536)))))
        (local.set $v (i32.load8_u offset=64 (local.get $c)))
        (if (i32.eq (local.get $v) (i32.const 255))
          (then (call $bad (i32.sub (i32.sub (local.get $i) (i32.const 1)) (i32.const 65536)))))
        (local.set $acc (i32.or (i32.shl (local.get $acc) (i32.const 6)) (local.get $v)))
        (local.set $q (i32.add (local.get $q) (i32.const 1)))
        (if (i32.eq (local.get $q) (i32.const 4))
          (then
            (i32.store8 (local.get $o) (i32.shr_u (local.get $acc) (i32.const 16)))
            (i32.store8 offset=1 (local.get $o) (i32.shr_u (local.get $acc) (i32.const 8)))
            (i32.store8 offset=2 (local.get $o) (local.get $acc))
            (local.set $o (i32.add (local.get $o) (i32.const 3)))
            (local.set $acc (i32.const 0))
            (local.set $q (i32.const 0))))
        (br $next)))
    (if (i32.eq (local.get $q) (i32.const 1)) (then (call $die (i32.const 832) (i32.const 1))))
    (if (i32.eq (local.get $q) (i32.const 2))
      (then
        (i32.store8 (local.get $o) (i32.shr_u (local.get $acc) (i32.const 4)))
        (local.set $o (i32.add (local.get $o) (i32.const 1)))))
    (if (i32.eq (local.get $q) (i32.const 3))
      (then
        (i32.store8 (local.get $o) (i32.shr_u (local.get $acc) (i32.const 10)))
        (i32.store8 offset=1 (local.get $o) (i32.shr_u (local.get $acc) (i32.const 2)))
        (local.set $o (i32.add (local.get $o) (i32.const 2)))))
    (if (call $write_all (i32.const 1) (i32.const 65536) (i32.sub (local.get $o) (i32.const 65536)))
      (then (call $proc_exit (i32.const 1)))))

  (func (export "_start")
    (local $argc i32) (local $mode i32)
    (if (call $args_sizes_get (i32.const 1024) (i32.const 1028)) (then (call $proc_exit (i32.const 2))))
    (local.set $argc (i32.load (i32.const 1024)))
    (if (i32.or (i32.gt_u (local.get $argc) (i32.const 64))
                (i32.gt_u (i32.load (i32.const 1028)) (i32.const 61440)))
      (then (call $die (i32.const 768) (i32.const 2))))
    (drop (call $args_get (i32.const 2048) (i32.const 4096)))
    (if (i32.gt_u (local.get $argc) (i32.const 2)) (then (call $die (i32.const 768) (i32.const 2))))
    (if (i32.eq (local.get $argc) (i32.const 2))
      (then
        (local.set $mode (i32.load (i32.const 2052)))
        (if (i32.or (call $streq (local.get $mode) (i32.const 352)) (call $streq (local.get $mode) (i32.const 356)))
          (then (call $say (i32.const 1) (i32.const 368)) (return)))
        (if (i32.or (call $streq (local.get $mode) (i32.const 328))
                    (i32.or (call $streq (local.get $mode) (i32.const 336)) (call $streq (local.get $mode) (i32.const 340))))
          (then (call $decode) (return)))
        (if (i32.eqz (call $streq (local.get $mode) (i32.const 320)))
          (then (call $die (i32.const 768) (i32.const 2))))))
    (call $encode))
)
