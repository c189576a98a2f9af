;; upper: copy stdin to stdout with ASCII a-z upper-cased (a reserved built-in, seed 000).
;; A WASI preview-1 command: reads 64 KiB chunks, writes them back; exit 1 on an I/O error.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)
  ;; 0: read iovec, 8: nread, 16: write iovec, 24: nwritten, 1024..: the buffer

  (func $write_all (param $ptr i32) (param $len i32) (result i32)
    (local $n i32)
    (block $done
      (loop $again
        (br_if $done (i32.eqz (local.get $len)))
        (i32.store (i32.const 16) (local.get $ptr))
        (i32.store (i32.const 20) (local.get $len))
        (if (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))
          (then (return (i32.const 1))))
        (local.set $n (i32.load (i32.const 24)))
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $n)))
        (local.set $len (i32.sub (local.get $len) (local.get $n)))
        (br $again)))
    (i32.const 0))

  (func (export "_start")
    (local $n i32) (local $i i32) (local $c i32)
    (loop $read
      (i32.store (i32.const 0) (i32.const 1024))
      (i32.store (i32.const 4) (i32.const 65536))
      (if (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))
        (then (call $proc_exit (i32.const 1))))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.eqz (local.get $n)) (then (return)))
      (local.set $i (i32.const 0))
      (block $end
        (loop $up
          (br_if $end (i32.ge_u (local.get $i) (local.get $n)))
          (local.set $c (i32.load8_u offset=1024 (local.get $i)))
          (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
            (then (i32.store8 offset=1024 (local.get $i) (i32.sub (local.get $c) (i32.const 32)))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $up)))
      (if (call $write_all (i32.const 1024) (local.get $n))
        (then (call $proc_exit (i32.const 1))))
      (br $read)))
)
