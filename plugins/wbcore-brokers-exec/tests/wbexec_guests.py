"""Helpers: register a WAT guest as a toolkit's command (so its #+CAPS apply)."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

WASI_WRITE = ('(import "wasi_snapshot_preview1" "fd_write" '
              '(func $fd_write (param i32 i32 i32 i32) (result i32)))')


def wat_bytes(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


@pytest.fixture
def register_guest(make_toolkit):
    import wasmtime

    from wbcore_runtime.build import builder

    def reg(rt: Any, name: str, wat: str, caps: str = "", profile: str | None = None) -> Any:
        extra = {"CLI_BIN": name, **({"PROFILE": profile} if profile else {})}
        make_toolkit(name, exec="command", caps=caps, extra=extra)
        rt.discover(refresh=True)
        art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat)))
        return builder.register_artifact(rt, name, art.sha256)

    return reg


def call_and_print(cap: str, request: dict) -> str:
    """A WASI command that sends one fixed CBOR request to wb.<cap> and writes the
    response (or, on a negative status, the error body) to stdout."""
    req = cbor2.dumps(request)
    return f"""(module
  {WASI_WRITE}
  (import "wb" "{cap}" (func $call (param i32 i32 i32 i32) (result i64)))
  (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
  (memory (export "memory") 64)
  (data (i32.const 64) "{wat_bytes(req)}")
  (func (export "_start") (local $n i64)
    (local.set $n (call $call (i32.const 64) (i32.const {len(req)}) (i32.const 65536) (i32.const 3000000)))
    (if (i64.lt_s (local.get $n) (i64.const 0))
      (then (local.set $n (call $fetch (i32.const 65536) (i32.const 3000000)))))
    (i32.store (i32.const 0) (i32.const 65536))
    (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""

HELLO = f"""(module {WASI_WRITE}
  (memory (export "memory") 1)
  (data (i32.const 100) "hello")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100)) (i32.store (i32.const 4) (i32.const 5))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""

#: Writes 1 MiB (zeros) to stdout.
MEGABYTE = f"""(module {WASI_WRITE}
  (memory (export "memory") 17)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16)) (i32.store (i32.const 4) (i32.const 1048576))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""
