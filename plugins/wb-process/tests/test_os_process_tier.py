"""The os_process tier: a registered command run in its own sandboxed process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from wb_process.sandbox import probe

pytest.importorskip("wasmtime")
pytestmark = pytest.mark.skipif(not probe()[0], reason="sandbox unavailable here")

ECHO_WAT = """
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 1024))
    (drop (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (i32.store (i32.const 4) (i32.load (i32.const 8)))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 3))))
"""

SPIN_WAT = '(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))'


def request(rt, tmp_path: Path, wat: str, **kw):
    import wasmtime

    from wbcore.calls import CommandRequest, Principal
    from wbcore.policy import profile

    art = tmp_path / "m.wasm"
    art.write_bytes(wasmtime.wat2wasm(wat))
    base = CommandRequest(name="echo", sha256="0" * 64, artifact=art, argv=(), stdin=b"ping", profile=profile("compute"),
                          timeout_s=5.0, principal=Principal())
    return dataclasses.replace(base, **kw)


def test_command_runs_in_its_own_sandboxed_process(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime()
    tier = rt.tiers.get("os_process")
    assert tier.available().ok
    res = tier.factory(rt).call(request(rt, tmp_path, ECHO_WAT))
    assert (res.exit_code, res.stdout) == (3, b"ping")


def test_infinite_loop_ends_at_the_deadline(make_runtime, tmp_path: Path) -> None:
    from wbcore.errors import Timeout

    rt = make_runtime()
    with pytest.raises(Timeout):
        rt.tiers.get("os_process").factory(rt).call(request(rt, tmp_path, SPIN_WAT, timeout_s=1.0))


def test_caps_are_not_silently_dropped(make_runtime, tmp_path: Path) -> None:
    from wbcore.errors import CapabilityDenied

    rt = make_runtime()
    with pytest.raises(CapabilityDenied, match="does not bridge capabilities"):
        rt.tiers.get("os_process").factory(rt).call(request(rt, tmp_path, ECHO_WAT, caps=frozenset({"kv"})))
