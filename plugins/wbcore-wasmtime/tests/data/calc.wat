(component
  (core module $m
    (memory (export "mem") 1)
    (global $bump (mut i32) (i32.const 1024))
    (func $realloc (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $bump local.set $p
      global.get $bump local.get 3 i32.add global.set $bump
      local.get $p)
    (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)
    (func (export "spin") (loop $l br $l))
    ;; greet(name: string) -> string : returns the input (ptr,len) written at 16
    (func (export "echo") (param i32 i32) (result i32)
      (i32.store (i32.const 16) (local.get 0))
      (i32.store (i32.const 20) (local.get 1))
      (i32.const 16))
    ;; safe-div(a: s32, b: s32) -> result<s32, string>
    (data (i32.const 100) "division by zero")
    (func (export "div") (param i32 i32) (result i32)
      (if (i32.eqz (local.get 1))
        (then
          (i32.store8 (i32.const 32) (i32.const 1))
          (i32.store (i32.const 36) (i32.const 100))
          (i32.store (i32.const 40) (i32.const 16)))
        (else
          (i32.store8 (i32.const 32) (i32.const 0))
          (i32.store (i32.const 36) (i32.div_s (local.get 0) (local.get 1)))))
      (i32.const 32))
  )
  (core instance $i (instantiate $m))
  (alias core export $i "mem" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (func (export "add") (param "a" u32) (param "b" u32) (result u32)
    (canon lift (core func $i "add")))
  (func (export "spin") (canon lift (core func $i "spin")))
  (func (export "echo") (param "text" string) (result string)
    (canon lift (core func $i "echo") (memory $mem) (realloc $realloc) string-encoding=utf8))
  (type $r (result s32 (error string)))
  (func (export "div") (param "a" s32) (param "b" s32) (result $r)
    (canon lift (core func $i "div") (memory $mem) (realloc $realloc) string-encoding=utf8))
)
