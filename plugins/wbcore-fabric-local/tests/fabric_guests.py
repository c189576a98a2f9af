"""WAT guests of this suite's own, with the shared ones from ``wbcore_testing.fixtures``, and the
fixtures that register them (deployer trust: no toolkit, no caps)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from wbcore_testing.fixtures import ECHO_OR_TRAP as ECHO  # noqa: F401 (the suite's tests import it from here)
from wbcore_testing.fixtures import K_UPPER, WAT_WRITE, register_wat, wasi  # noqa: F401

_COPY = """(loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.gt_u (local.get $n) (i32.const 0)) (then (call $w (i32.const 1024) (local.get $n)) (br $l))))"""  # noqa: E501

#: writes {"v":"<stdin>"}: a JSON object when stdin needs no escaping
BRACE = ("(module " + wasi("fd_read", "fd_write") + """
  (memory (export "memory") 2)
  (data (i32.const 200) "{\\22v\\22:\\22")
  (data (i32.const 220) "\\22}") """ + WAT_WRITE + """
  (func (export "_start") (local $n i32)
    (call $w (i32.const 200) (i32.const 6)) """ + _COPY + """
    (call $w (i32.const 220) (i32.const 2))))""")


SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""

#: kernel: a call counter per instance (4 bytes LE): shows an instance is reused
K_COUNT = """(module (memory (export "memory") 2)
  (global $calls (mut i32) (i32.const 0))
  (func (export "process") (param $n i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store offset=65536 (i32.const 0) (global.get $calls))
    (i32.const 4)))"""


@pytest.fixture
def rt(make_runtime: Callable[..., Any]) -> Any:
    """A runtime with every installed plugin (the workers open the same set)."""
    runtime = make_runtime()
    if "command" not in runtime.shapes or "kernel" not in runtime.shapes:
        pytest.skip("needs the command and kernel shapes' runners (pip install wbcore-wasmtime)")
    if "local" not in runtime.fabric_engines:
        pytest.skip("wbcore-fabric-local is not installed in this environment")
    return runtime


@pytest.fixture
def register(rt: Any) -> Callable[..., Any]:
    """``register(name, wat, kind="command", **options) -> Entry`` on ``rt``."""
    import wasmtime

    return functools.partial(register_wat, rt, wat2wasm=wasmtime.wat2wasm)
