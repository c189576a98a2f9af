(component
  (type $kvt (instance
    (type $res (result (list u8) (error (list u8))))
    (export "call" (func (param "request" (list u8)) (result $res)))))
  (import "wb:host/kv@0.1.0" (instance $kv (type $kvt)))
  (core module $m
    (import "host" "kv-call" (func $kvcall (param i32 i32 i32)))
    (memory (export "mem") 1)
    (global $bump (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $bump local.set $p
      global.get $bump local.get 3 i32.add global.set $bump
      local.get $p)
    ;; put(request: list<u8>) -> list<u8>: forwards to kv.call, returns ok bytes (or err bytes)
    (func (export "raw") (param i32 i32) (result i32)
      (call $kvcall (local.get 0) (local.get 1) (i32.const 64))
      ;; result layout at 64: tag u8, then list (ptr,len) at 68
      (i32.store (i32.const 80) (i32.load (i32.const 68)))
      (i32.store (i32.const 84) (i32.load (i32.const 72)))
      (i32.const 80))
  )
  (core module $shim
    (table (export "t") 1 funcref)
    (type $ft (func (param i32 i32 i32)))
    (func (export "kv-call") (param i32 i32 i32) (call_indirect (type $ft) (local.get 0) (local.get 1) (local.get 2) (i32.const 0))))
  (core instance $s (instantiate $shim))
  (core instance $i (instantiate $m (with "host" (instance $s))))
  (alias core export $i "mem" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias export $kv "call" (func $kvf))
  (core func $lowered (canon lower (func $kvf) (memory $mem) (realloc $realloc)))
  (core module $fix
    (import "" "f" (func (param i32 i32 i32)))
    (import "" "t" (table 1 funcref))
    (elem (i32.const 0) func 0))
  (core instance (instantiate $fix (with "" (instance (export "f" (func $lowered)) (export "t" (table $s "t"))))))
  (func (export "raw") (param "request" (list u8)) (result (list u8))
    (canon lift (core func $i "raw") (memory $mem) (realloc $realloc)))
)
