"""The Dock's guest ABI on wasmtime (``wbcore_wasmtime.dock_link``), with an in-process test
broker (a fixture, not product)."""

from __future__ import annotations

import cbor2
import pytest
import wasmtime

from wbcore_wasmtime import dock_link
from wbcore_audit_trail import reader
from wbcore_runtime import hookimpl
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.dispatch.dock import STATUS, Dock
from wbcore_runtime.contract.errors import CapabilityDenied, ErrorKind, InvalidArgs, NotFound
from wbcore_runtime.contract.records import Broker

class _EchoDriver:
    def handle(self, call):
        if call.op == "echo":
            return {"echo": call.args}
        if call.op == "big":
            return {"blob": b"x" * call.arg("n", int)}
        if call.op == "missing":
            raise NotFound("no such thing")
        raise RuntimeError("secret-token-123 must never leak")


class _TestBrokers:
    @hookimpl
    def wbcore_brokers(self):
        yield Broker(name="kv", summary="test echo", factory=lambda rt: _EchoDriver(),
                     operations=("echo", "big", "missing", "boom"))


def _wat_bytes(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def guest(request: dict, *, cap: str = "kv", resp_cap: int = 4096) -> bytes:
    """A core module that sends one CBOR request to wb.<cap> and exports the result."""
    req = cbor2.dumps(request)
    return wasmtime.wat2wasm(f"""
    (module
      (import "wb" "{cap}" (func $call (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (memory (export "memory") 2)
      (data (i32.const 0) "{_wat_bytes(req)}")
      (func (export "run") (result i64)
        (call $call (i32.const 0) (i32.const {len(req)}) (i32.const 1024) (i32.const {resp_cap})))
      (func (export "refetch") (result i64)
        (call $fetch (i32.const 8192) (i32.const 60000))))
    """)


def instantiate(dock: Dock, wasm: bytes, caps, **context):
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    module = wasmtime.Module(engine, wasm)
    linker = wasmtime.Linker(engine)
    ctx = dock.context(principal=Principal("t", "echo"), caps=caps, **context)
    dock_link.link(dock, linker, module, ctx)
    inst = linker.instantiate(store, module)
    return store, inst, ctx


def _mem(store, inst, start, n):
    return inst.exports(store)["memory"].read(store, start, start + n)


@pytest.fixture
def dock(make_runtime):
    return make_runtime(plugins=[_TestBrokers()]).dock


def test_ungranted_import_does_not_instantiate_and_granting_runs_it(dock):
    wasm = guest({"op": "echo", "a": 1})
    with pytest.raises(CapabilityDenied, match="'kv'"):
        instantiate(dock, wasm, caps={"vfs"})
    store, inst, _ = instantiate(dock, wasm, caps={"vfs", "kv"})
    n = inst.exports(store)["run"](store)
    assert n > 0
    assert cbor2.loads(_mem(store, inst, 1024, n)) == {"echo": {"a": 1}}


def test_unknown_cap_import_is_denied(dock):
    with pytest.raises(CapabilityDenied, match="unknown cap 'teleport'"):
        instantiate(dock, guest({"op": "echo"}, cap="teleport"), caps={"kv"})


def test_granted_cap_without_broker_is_not_found(dock):
    with pytest.raises(NotFound, match="queue"):
        instantiate(dock, guest({"op": "echo"}, cap="queue"), caps={"queue"})


def test_error_status_and_body_reach_the_guest(dock):
    store, inst, _ = instantiate(dock, guest({"op": "missing"}), caps={"kv"})
    rv = inst.exports(store)["run"](store)
    assert rv == -STATUS[ErrorKind.NOT_FOUND]
    n = inst.exports(store)["refetch"](store)
    err = cbor2.loads(_mem(store, inst, 8192, n))
    assert err["error"] == "not-found" and "no such thing" in err["message"]


def test_broker_crash_is_internal_without_leaking(dock, wb_home):
    store, inst, _ = instantiate(dock, guest({"op": "boom"}), caps={"kv"})
    assert inst.exports(store)["run"](store) == -STATUS[ErrorKind.INTERNAL]
    n = inst.exports(store)["refetch"](store)
    assert b"secret-token" not in _mem(store, inst, 8192, n)
    dock.audit.flush()
    assert "secret-token" not in (wb_home / "audit" / "audit.jsonl").read_text()


def test_two_call_protocol_for_a_large_response(dock):
    store, inst, _ = instantiate(dock, guest({"op": "big", "n": 20000}, resp_cap=16), caps={"kv"})
    n = inst.exports(store)["run"](store)
    assert n > 20000
    assert _mem(store, inst, 1024, 16) == b"\0" * 16  # nothing written: it did not fit
    assert inst.exports(store)["refetch"](store) == n
    assert cbor2.loads(_mem(store, inst, 8192, n)) == {"blob": b"x" * 20000}


def test_wrong_signature_is_refused(dock):
    wasm = wasmtime.wat2wasm('(module (import "wb" "kv" (func (param i32) (result i32))) (memory (export '
                             '"memory") 1))')
    with pytest.raises(InvalidArgs, match="wrong signature"):
        instantiate(dock, wasm, caps={"kv"})


def test_info_is_always_linked(dock):
    wasm = wasmtime.wat2wasm('''(module (import "wb" "info" (func $i (param i32 i32) (result i64)))
      (memory (export "memory") 1) (func (export "run") (result i64) (call $i (i32.const 0) (i32.const 1000))))''')  # noqa: E501
    store, inst, ctx = instantiate(dock, wasm, caps=set())
    n = inst.exports(store)["run"](store)
    assert cbor2.loads(_mem(store, inst, 0, n))["instance"] == ctx.instance


class _RevokingDriver:
    """Revokes its caller during the third call: the guest's fourth call must be denied."""

    def __init__(self):
        self.calls = 0

    def handle(self, call):
        self.calls += 1
        if self.calls == 3:
            call.dock.revoke(call.ctx.principal)
        return {"n": self.calls}


def test_revoking_mid_flight_stops_the_running_guests_next_call(make_runtime):
    drv = _RevokingDriver()

    class _Plugin:
        @hookimpl
        def wbcore_brokers(self):
            yield Broker(name="kv", summary="test", factory=lambda rt: drv, operations=("echo",))

    dock = make_runtime(plugins=[_Plugin()]).dock
    req = cbor2.dumps({"op": "echo"})
    wasm = wasmtime.wat2wasm(f"""(module
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (memory (export "memory") 1)
      (data (i32.const 0) "{_wat_bytes(req)}")
      (func (export "run") (result i32) (local $i i32) (local $ok i32)
        (loop $l
          (if (i64.ge_s (call $kv (i32.const 0) (i32.const {len(req)}) (i32.const 512) (i32.const 512)) (i64.const 0))
            (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get $i) (i32.const 10))))
        (local.get $ok)))""")  # noqa: E501
    store, inst, ctx = instantiate(dock, wasm, caps={"kv"})
    assert inst.exports(store)["run"](store) == 3
    outcomes = [(e["outcome"], e["reason"]) for e in reader.entries(dock.audit)]
    assert outcomes == [("allowed", None)] * 3 + [("denied", "revoked")] * 7


@pytest.mark.parametrize("link", ["fast", "public"])
def test_pointers_outside_guest_memory_are_invalid_args(make_runtime, link):
    dock = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_LINK": link}).dock
    wasm = wasmtime.wat2wasm('''(module
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (memory (export "memory") 1)
      (func (export "oob_request") (result i64) (call $kv (i32.const 65530) (i32.const 100) (i32.const 0) (i32.const 100)))
      (func (export "huge_len") (result i64) (call $kv (i32.const 0) (i32.const -1) (i32.const 0) (i32.const 100)))
      (func (export "oob_response") (result i64)
        (i32.store8 (i32.const 0) (i32.const 0xa1)) (i32.store8 (i32.const 1) (i32.const 0x62))
        (i32.store8 (i32.const 2) (i32.const 0x6f)) (i32.store8 (i32.const 3) (i32.const 0x70))
        (i32.store8 (i32.const 4) (i32.const 0x64)) (i32.store (i32.const 5) (i32.const 0x6f686365))
        (call $kv (i32.const 0) (i32.const 9) (i32.const 65535) (i32.const 1000)))
      (func (export "fetch_len") (result i64) (call $fetch (i32.const 0) (i32.const 0))))''')  # noqa: E501
    store, inst, _ = instantiate(dock, wasm, caps={"kv"})
    ex = inst.exports(store)
    assert ex["oob_request"](store) == -STATUS[ErrorKind.INVALID_ARGS]
    assert ex["huge_len"](store) == -STATUS[ErrorKind.INVALID_ARGS]
    n = ex["oob_response"](store)  # {"op": "echo"}: a fine call whose answer cannot be written there
    assert n > 0 and ex["fetch_len"](store) == n


@pytest.mark.parametrize("link", ["fast", "public"])
def test_a_request_over_the_cap_is_refused_before_it_is_copied(make_runtime, link):
    """A length inside guest memory but over the Dock's 64 MiB request cap: before, the host
    copied (and hashed) all of it before the cap refused it, so a guest with a large memory
    made every call cost the host its whole memory; now the length alone is refused."""
    import tracemalloc

    dock = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_LINK": link}).dock
    pages = 1100  # 72 MB: past the cap, inside the memory
    wasm = wasmtime.wat2wasm(f'''(module
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (memory (export "memory") {pages})
      (func (export "run") (result i64)
        (call $kv (i32.const 0) (i32.const {pages * 65536}) (i32.const 0) (i32.const 0))))''')
    store, inst, _ = instantiate(dock, wasm, caps={"kv"})
    tracemalloc.start()
    try:
        assert inst.exports(store)["run"](store) == -STATUS[ErrorKind.INVALID_ARGS]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"the host allocated {peak >> 20} MiB for a refused request"
    assert reader.tail(dock.audit, 1)[0]["reason"] == "too-large"
