;; cat: stdin -> stdout; with any argument "fail": "bad input" on stderr, exit 3.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $asz (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 2)
  (data (i32.const 200) "bad input\n")
  (func (export "_start")
    (local $n i32)
    (drop (call $asz (i32.const 0) (i32.const 4)))
    (if (i32.gt_u (i32.load (i32.const 0)) (i32.const 1))
      (then
        (i32.store (i32.const 16) (i32.const 200))
        (i32.store (i32.const 20) (i32.const 10))
        (drop (call $write (i32.const 2) (i32.const 16) (i32.const 1) (i32.const 24)))
        (call $exit (i32.const 3))))
    (block $done
      (loop $l
        (i32.store (i32.const 32) (i32.const 1024))
        (i32.store (i32.const 36) (i32.const 60000))
        (drop (call $read (i32.const 0) (i32.const 32) (i32.const 1) (i32.const 40)))
        (local.set $n (i32.load (i32.const 40)))
        (br_if $done (i32.eqz (local.get $n)))
        (i32.store (i32.const 48) (i32.const 1024))
        (i32.store (i32.const 52) (local.get $n))
        (drop (call $write (i32.const 1) (i32.const 48) (i32.const 1) (i32.const 56)))
        (br $l))))
)
