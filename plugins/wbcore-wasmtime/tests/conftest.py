"""Fixtures for wbcore-wasmtime's tests: a runtime with only this plugin, and a helper that
compiles WAT, stores it and registers it as a command or kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from wbcore_testing.fixtures import K_UPPER, register_wat, wasi  # noqa: F401 (the suite's tests import them from here)


@pytest.fixture
def rt(make_runtime: Callable[..., Any]) -> Any:
    return make_runtime(plugins=["wasmtime"])


@pytest.fixture
def register(rt: Any) -> Callable[..., Any]:
    """``register(name, wat, kind="command", profile="compute", arg_mode="argv", **options) -> Entry``."""
    import wasmtime

    return functools.partial(register_wat, rt, wat2wasm=wasmtime.wat2wasm)


# --- guests ------------------------------------------------------------------------------

ECHO = f"""(module {wasi("fd_read", "fd_write", "proc_exit")}
  (memory (export "memory") 2)
  (func (export "_start") (local $n i32)
    (loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.eqz (local.get $n)) (then (return)))
      (i32.store (i32.const 16) (i32.const 1024)) (i32.store (i32.const 20) (local.get $n))
      (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))
      (br $l))))"""

EXIT3 = f"""(module {wasi("fd_write", "proc_exit")}
  (memory (export "memory") 1)
  (data (i32.const 100) "oops\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100)) (i32.store (i32.const 4) (i32.const 5))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $proc_exit (i32.const 3))))"""

#: prints argc then the environment size as two bytes ("<argc><envc>")
ARGS_ENV = f"""(module {wasi("fd_write", "args_sizes_get", "environ_sizes_get")}
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $args_sizes_get (i32.const 200) (i32.const 204)))
    (drop (call $environ_sizes_get (i32.const 208) (i32.const 212)))
    (i32.store8 (i32.const 300) (i32.add (i32.const 48) (i32.load (i32.const 200))))
    (i32.store8 (i32.const 301) (i32.add (i32.const 48) (i32.load (i32.const 208))))
    (i32.store (i32.const 0) (i32.const 300)) (i32.store (i32.const 4) (i32.const 2))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""

LOOP = """(module (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))"""

BOMB = """(module (memory (export "memory") 1)
  (func (export "_start")
    (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))"""

FLOOD = f"""(module {wasi("fd_write")}
  (memory (export "memory") 2)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
    (loop $l (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))) (br $l))))"""

TRAP = """(module (memory (export "memory") 1)
  (func (export "_start") (drop (i32.div_u (i32.const 1) (i32.const 0)))))"""

WANTS_CAP = """(module
  (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 1)
  (func (export "_start")))"""

WANTS_ENV = """(module
  (import "env" "system" (func $system (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))"""

#: kernel that claims a huge out_len
K_LIAR = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (i32.const 0x7fffffff)))"""

K_LOOP = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (loop $l (br $l)) (i32.const 0)))"""

K_TRAP_ONCE = """(module (memory (export "memory") 2)
  (global $calls (mut i32) (i32.const 0))
  (func (export "process") (param $n i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.eq (local.get $n) (i32.const 13)) (then unreachable))
    (i32.store offset=65536 (i32.const 0) (global.get $calls))
    (i32.const 4)))"""
