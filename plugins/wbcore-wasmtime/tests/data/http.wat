;; a component that imports wasi:http (never linked: egress goes through wb:host/net).
(component
  (type $h (instance))
  (import "wasi:http/outgoing-handler@0.2.0" (instance (type $h)))
  (core module $m (func (export "f") (result i32) i32.const 1))
  (core instance $i (instantiate $m))
  (func (export "f") (result u32) (canon lift (core func $i "f"))))
