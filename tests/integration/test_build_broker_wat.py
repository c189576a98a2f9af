"""The build cap end to end: real wat lane, real wasmtime run, real consent."""

from __future__ import annotations

import cbor2
import pytest

from wbcore_runtime.trust import consent
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.dispatch.dock import KIND_OF_STATUS

HELLO = r"""
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "built by the build cap\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 23))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"""

LOOP = '(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))'


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["wasmtime", "brokers-build"])


def test_guest_compiles_wat_and_runs_it(rt):
    ctx = rt.dock.context(principal=Principal("acme", "maker"), caps=("build",))
    req = cbor2.dumps({"op": "compile_run", "lang": "wat", "files": {"hello.wat": HELLO}})
    status, body = rt.dock.call_raw(ctx, "build", req)  # the ABI path a guest uses
    assert status == 0, cbor2.loads(body)
    out = cbor2.loads(body)
    assert out["stdout"] == b"built by the build cap\n" and out["exit_code"] == 0
    assert len(out["sha256"]) == 64 and "wat2wasm" in out["log"]


def test_built_program_is_bounded_by_the_compute_deadline(rt):
    ctx = rt.dock.context(principal=Principal("acme", "maker"), caps=("build",))
    status, body = rt.dock.call_raw(ctx, "build",
                                    cbor2.dumps({"op": "compile_run", "lang": "wat", "files": {"l.wat": LOOP},
                                                 "timeout": 0.3}))
    assert KIND_OF_STATUS[status].value == "timeout", cbor2.loads(body)


def test_build_cap_needs_explicit_consent_even_first_party(rt, make_toolkit):
    make_toolkit("maker", caps="build kv")
    tk = rt.toolkit("maker")
    assert rt.effective_caps(tk) == {"kv"}
    consent.ConsentStore(rt.home).grant("maker", ["build"], None)
    assert rt.effective_caps(tk) == {"kv", "build"}
