"""The deadline holds while a guest is blocked in host code: a WASI sleep (``poll_oneoff``)
and a broker call that blocks. Epoch interruption alone fires only while wasm runs."""

from __future__ import annotations

import struct
import threading
import time

import cbor2
import pytest
import wasmtime

from wbcore_audit_trail import reader
from wbcore_runtime.build import builder
from wbcore_runtime import hookimpl
from wbcore_runtime.trust import policy
from wbcore_runtime.contract.errors import NotFound, Timeout
from wbcore_runtime.contract.records import Broker

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0

POLL = '(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))'
WRITE = '(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))'


def _hex(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def clock_subscription(seconds: float, *, userdata: int = 7, clock: int = 1) -> bytes:
    """One WASI preview-1 subscription: a relative clock timeout (48 bytes)."""
    return struct.pack("<QB7xI4xQQH6x", userdata, 0, clock, int(seconds * 1e9), 0, 0)


def sleeper(seconds: float) -> str:
    """A command that sleeps ``seconds`` in poll_oneoff, then prints the event count and
    the first event's userdata and error."""
    return f"""(module {POLL} {WRITE}
      (memory (export "memory") 1)
      (data (i32.const 0) "{_hex(clock_subscription(seconds))}")
      (func (export "_start")
        (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
        (i32.store8 (i32.const 200) (i32.add (i32.const 48) (i32.load (i32.const 128))))
        (i32.store8 (i32.const 201) (i32.add (i32.const 48) (i32.load8_u (i32.const 64))))
        (i32.store8 (i32.const 202) (i32.add (i32.const 48) (i32.load16_u (i32.const 72))))
        (i32.store (i32.const 300) (i32.const 200)) (i32.store (i32.const 304) (i32.const 3))
        (drop (call $w (i32.const 1) (i32.const 300) (i32.const 1) (i32.const 308)))))"""


def test_a_short_sleep_returns_its_event(rt, register):
    register("nap", sleeper(0.05))
    t = time.monotonic()
    res = rt.call("nap")
    assert res.exit_code == 0 and res.stdout == b"170"  # 1 event, userdata 7, errno 0
    assert 0.04 <= time.monotonic() - t < 2


def test_a_30s_sleep_under_compute_ends_at_its_deadline_with_exit_124(rt, register, wbx):
    register("sleep30", sleeper(30), profile="compute")
    deadline = policy.profile("compute").timeout_s
    t = time.monotonic()
    r = wbx("run", "sleep30", runtime=rt, input=b"")
    took = time.monotonic() - t
    assert r.exit_code == 124, r.stderr
    assert deadline - 0.1 <= took <= deadline + SLACK_S, took
    t = time.monotonic()
    with pytest.raises(Timeout, match="deadline"):
        rt.call("sleep30", timeout=0.3)
    assert time.monotonic() - t <= 0.3 + SLACK_S


def test_cancel_stops_a_sleeping_guest(rt, register):
    register("sleep30", sleeper(30))
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    t = time.monotonic()
    with pytest.raises(Timeout, match="cancelled"):
        rt.call("sleep30", cancel=cancel)
    assert time.monotonic() - t < 0.2 + SLACK_S


# --- a broker that blocks ---------------------------------------------------------------


class _BlockingDriver:
    """``sleep`` blocks until released (or 30 s), ignoring the context's remaining time."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def handle(self, call):
        if call.op == "sleep":
            self.entered.set()
            self.release.wait(30)
            return {"slept": True}
        if call.op == "echo":
            return {"echo": call.args.get("text", "")}
        raise NotFound(call.op)


def cap_guest(request: dict) -> bytes:
    """A WASI command: one wb.kv call, then the CBOR response (or error) to stdout."""
    req = cbor2.dumps(request)
    return bytes(wasmtime.wat2wasm(f"""(module {WRITE}
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (memory (export "memory") 2)
      (data (i32.const 64) "{_hex(req)}")
      (func (export "_start") (local $n i64)
        (local.set $n (call $kv (i32.const 64) (i32.const {len(req)}) (i32.const 4096) (i32.const 60000)))
        (if (i64.lt_s (local.get $n) (i64.const 0)) (then (local.set $n (call $fetch (i32.const 4096) (i32.const 60000)))))
        (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""))  # noqa: E501


@pytest.fixture
def blocking(make_runtime, make_toolkit):
    driver = _BlockingDriver()

    class _Plugin:
        @hookimpl
        def wbcore_brokers(self):
            yield Broker(name="kv", summary="blocks on purpose (test)", factory=lambda rt: driver,
                         operations=("sleep", "echo"))

    rt = make_runtime(plugins=["wasmtime", _Plugin()])
    for ident, request in (("sleepy", {"op": "sleep"}), ("echoer", {"op": "echo", "text": "still here"})):
        make_toolkit(ident, exec="command", caps="kv", extra={"CLI_BIN": ident})
        rt.discover(refresh=True)
        art = rt.artifacts.put_bytes(cap_guest(request))
        builder.register_artifact(rt, ident, art.sha256)
    yield rt, driver
    driver.release.set()


@pytest.mark.parametrize("link", ["fast", "public"])
def test_a_broker_blocking_past_the_deadline_ends_the_guest_at_its_deadline(blocking, link):
    rt, driver = blocking
    rt.env["WB_DOCK_LINK"] = link
    t = time.monotonic()
    with pytest.raises(Timeout, match="deadline"):
        rt.call("sleepy", timeout=1.0)
    assert 0.9 <= time.monotonic() - t <= 1.5
    assert driver.entered.is_set()

    # the host carries on: the next call (same thread, same cap) works while the broker still blocks
    out = rt.call("echoer")
    assert out.exit_code == 0 and cbor2.loads(out.stdout) == {"echo": "still here"}

    # the blocked call's late result is discarded and audited as timeout
    driver.release.set()
    for _ in range(200):
        rt.dock.audit.flush()
        late = [e for e in reader.entries(rt.dock.audit) if e["op"] == "sleep"]
        if late:
            break
        time.sleep(0.01)
    assert [(e["outcome"], e["kind"], e["reason"]) for e in late] == [("denied", "timeout", "deadline")]
    assert reader.verify(rt.dock.audit) == []


def test_a_blocked_broker_under_the_profile_deadline_exits_124(blocking, wbx):
    rt, _ = blocking
    deadline = policy.profile(rt.registry.get("command", "sleepy").profile).timeout_s
    t = time.monotonic()
    r = wbx("run", "sleepy", runtime=rt, input=b"")
    assert r.exit_code == 124, r.stderr
    assert time.monotonic() - t <= deadline + 0.5

