;; kernel: ASCII upper-case, entry process(in_len) -> out_len; input at 1024, output at 65536.
(module
  (memory (export "memory") 3)
  (func (export "process") (param $len i32) (result i32)
    (local $i i32) (local $c i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $c (i32.load8_u (i32.add (i32.const 1024) (local.get $i))))
        (if (i32.and (i32.ge_u (local.get $c) (i32.const 97)) (i32.le_u (local.get $c) (i32.const 122)))
          (then (local.set $c (i32.sub (local.get $c) (i32.const 32)))))
        (i32.store8 (i32.add (i32.const 65536) (local.get $i)) (local.get $c))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (local.get $len)))
