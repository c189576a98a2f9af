"""WAT guests and a helper that registers them (deployer trust: no toolkit, no caps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

WASI = '(import "wasi_snapshot_preview1" "{name}" (func ${name} {sig}))'
SIGS = {
    "fd_read": "(param i32 i32 i32 i32) (result i32)",
    "fd_write": "(param i32 i32 i32 i32) (result i32)",
}


def wasi(*names: str) -> str:
    return "\n".join(WASI.format(name=n, sig=SIGS[n]) for n in names)


_WRITE = """(func $w (param $p i32) (param $n i32)
    (i32.store (i32.const 16) (local.get $p)) (i32.store (i32.const 20) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))))"""

_COPY = """(loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.gt_u (local.get $n) (i32.const 0)) (then (call $w (i32.const 1024) (local.get $n)) (br $l))))"""

#: stdin → stdout; traps (an error, not an exit code) when stdin starts with "!"
ECHO = ("(module " + wasi("fd_read", "fd_write") + """
  (memory (export "memory") 2) """ + _WRITE + """
  (func (export "_start") (local $n i32) (local $first i32) (local.set $first (i32.const 1))
    (loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.and (local.get $first) (i32.and (i32.gt_u (local.get $n) (i32.const 0))
                                               (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 33))))
        (then unreachable))
      (local.set $first (i32.const 0))
      (if (i32.gt_u (local.get $n) (i32.const 0)) (then (call $w (i32.const 1024) (local.get $n)) (br $l))))))""")

#: writes {"v":"<stdin>"}: a JSON object when stdin needs no escaping
BRACE = ("(module " + wasi("fd_read", "fd_write") + """
  (memory (export "memory") 2)
  (data (i32.const 200) "{\\22v\\22:\\22")
  (data (i32.const 220) "\\22}") """ + _WRITE + """
  (func (export "_start") (local $n i32)
    (call $w (i32.const 200) (i32.const 6)) """ + _COPY + """
    (call $w (i32.const 220) (i32.const 2))))""")


def burn(iterations: int) -> str:
    """A CPU-bound command: ``iterations`` rounds of integer mixing, then "ok"."""
    return ("(module " + wasi("fd_write") + """
  (memory (export "memory") 1)
  (data (i32.const 100) "ok") """ + _WRITE + """
  (func (export "_start") (local $i i32) (local $x i32)
    (block $e (loop $l
      (br_if $e (i32.ge_u (local.get $i) (i32.const """ + str(iterations) + """)))
      (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1664525)) (i32.const 1013904223)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (if (i32.eq (local.get $x) (i32.const 7)) (then unreachable))
    (call $w (i32.const 100) (i32.const 2))))""")


SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""

#: kernel: output = input with ASCII upper-cased; in_off 1024, out_off 65536
K_UPPER = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (local $i i32) (local $c i32)
    (block $e (loop $l
      (br_if $e (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $c (i32.load8_u offset=1024 (local.get $i)))
      (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
        (then (local.set $c (i32.sub (local.get $c) (i32.const 32)))))
      (i32.store8 offset=65536 (local.get $i) (local.get $c))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.get $n)))"""

#: kernel: a call counter per instance (4 bytes LE): shows an instance is reused
K_COUNT = """(module (memory (export "memory") 2)
  (global $calls (mut i32) (i32.const 0))
  (func (export "process") (param $n i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store offset=65536 (i32.const 0) (global.get $calls))
    (i32.const 4)))"""


def register_wat(rt: Any, name: str, wat: str, kind: str = "command", **options: Any) -> Any:
    import wasmtime

    from wbcore.registry import Entry

    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat)))
    return rt.registry.register(Entry(kind=kind, name=name, sha256=art.sha256, shape=kind, toolkit=None,
                                      options=options))


@pytest.fixture
def rt(make_runtime: Callable[..., Any]) -> Any:
    """A runtime with every installed plugin (the workers open the same set)."""
    runtime = make_runtime()
    if "command" not in runtime.shapes or "kernel" not in runtime.shapes:
        pytest.skip("needs the command and kernel shapes' runners (pip install wb-wasmtime)")
    if "local" not in runtime.fabric_engines:
        pytest.skip("wb-fabric-local is not installed in this environment")
    return runtime


@pytest.fixture
def register(rt: Any) -> Callable[..., Any]:
    def reg(name: str, wat: str, kind: str = "command", **options: Any) -> Any:
        return register_wat(rt, name, wat, kind, **options)

    return reg
