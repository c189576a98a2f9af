"""The Dock's cadence (bytes in, bytes out), with an in-process test broker (a fixture, not product)."""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path

import cbor2
import pytest

from wbcore_runtime.dispatch.audit import GENESIS, chain_hash
from wbcore_runtime import hookimpl
from wbcore_runtime.contract.calls import Principal
import wbcore_runtime
from wbcore_runtime.dispatch.dock import STATUS
from wbcore_runtime.contract.errors import CapabilityDenied, ErrorKind, InvalidArgs, NotFound, Timeout
from wbcore_runtime.contract.records import Broker


def _trail(log) -> list[dict]:
    """The trail's lines as written: the core's tests read them by hand (the reader, with
    ``verify``, is wbcore-audit-trail's, tested there)."""
    log.flush()
    return [json.loads(raw) for seg in log.segments() for raw in seg.read_bytes().splitlines()]


class _EchoDriver:
    def handle(self, call):
        if call.op == "echo":
            return {"echo": call.args}
        if call.op == "big":
            return {"blob": b"x" * call.arg("n", int)}
        if call.op == "missing":
            raise NotFound("no such thing")
        if call.op == "slow":
            time.sleep(call.arg("s", float))
            return {"late": True}
        raise RuntimeError("secret-token-123 must never leak")


class _TestBrokers:
    @hookimpl
    def wbcore_brokers(self):
        yield Broker(name="kv", summary="test echo", factory=lambda rt: _EchoDriver(),
                     operations=("echo", "big", "missing", "boom", "slow"))


@pytest.fixture
def dock(make_runtime):
    return make_runtime(plugins=[_TestBrokers()]).dock


def test_bad_requests_are_invalid_args(dock):
    ctx = dock.context(principal=Principal("t"), caps={"kv"})
    assert dock.call_raw(ctx, "kv", b"\xff\xff")[0] == STATUS[ErrorKind.INVALID_ARGS]
    assert dock.call_raw(ctx, "kv", cbor2.dumps([1, 2]))[0] == STATUS[ErrorKind.INVALID_ARGS]
    with pytest.raises(InvalidArgs, match="unknown kv operation 'nope'"):
        dock.call(ctx, "kv", "nope")


def test_response_size_cap(dock):
    ctx = dock.context(principal=Principal("t"), caps={"kv"}, max_response=1000)
    with pytest.raises(InvalidArgs, match="exceeds the 1000-byte cap"):
        dock.call(ctx, "kv", "big", {"n": 2000})


def test_revocation_mid_flight_stops_the_next_call(dock):
    ctx = dock.context(principal=Principal("t", "x"), caps={"kv"})
    assert dock.call(ctx, "kv", "echo") == {"echo": {}}
    dock.revoke(ctx.principal)
    with pytest.raises(CapabilityDenied, match="revoked"):
        dock.call(ctx, "kv", "echo")
    dock.restore(ctx.principal)
    assert dock.call(ctx, "kv", "echo") == {"echo": {}}


def test_persisted_revocation_reaches_another_dock(make_runtime):
    a = make_runtime(plugins=[_TestBrokers()]).dock
    b = make_runtime(plugins=[_TestBrokers()]).dock
    ctx = b.context(principal=Principal("t", "y"), caps={"kv"})
    b.call(ctx, "kv", "echo")
    a.revoke(ctx.principal, "kv", persist=True)
    with pytest.raises(CapabilityDenied, match="revoked"):
        b.call(ctx, "kv", "echo")


def test_rate_limit_is_per_principal_and_audited(make_runtime, wb_home):
    rt = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_RATE": "5/60"})
    dock = rt.dock
    ctx = dock.context(principal=Principal("t", "fast"), caps={"kv"})
    other = dock.context(principal=Principal("t", "calm"), caps={"kv"})
    for _ in range(5):
        dock.call(ctx, "kv", "echo")
    with pytest.raises(CapabilityDenied, match="rate limit of 5 calls per 60 s") as exc:
        dock.call(ctx, "kv", "echo")
    assert exc.value.reason == "rate-limited"
    dock.call(other, "kv", "echo")
    entries = _trail(dock.audit)
    assert [e["outcome"] for e in entries].count("denied") == 1
    assert entries[-2]["reason"] == "rate-limited"


def test_rate_limit_holds_under_threads(make_runtime):
    dock = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_RATE": "200/60"}).dock
    ctx = dock.context(principal=Principal("t", "many"), caps={"kv"})
    ok = []

    def worker():
        for _ in range(100):
            try:
                dock.call(ctx, "kv", "echo")
                ok.append(1)
            except CapabilityDenied:
                pass

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ok) == 200
    prev = GENESIS
    for seq, entry in enumerate(_trail(dock.audit), 1):  # one unbroken chain: no line lost or torn
        claimed = entry.pop("hash")
        assert (entry["seq"], entry["prev"], chain_hash(prev, entry)) == (seq, prev, claimed)
        prev = claimed


def test_default_deny_from_python(dock):
    ctx = dock.context(principal=Principal("t"), caps=set())
    with pytest.raises(CapabilityDenied, match="not granted"):
        dock.call(ctx, "kv", "echo")


def test_default_rate_is_120000_per_minute_and_configurable(make_runtime):
    assert make_runtime(plugins=[_TestBrokers()], env={}).dock.limiter.limit == 120_000
    lim = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_RATE": "10/1.5"}).dock.limiter
    assert (lim.limit, lim.window) == (10, 1.5)
    with pytest.raises(InvalidArgs, match="WB_DOCK_RATE"):
        _ = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_RATE": "lots"}).dock




def test_the_core_never_imports_wasmtime():
    """The core describes, engines live in plugins: no module under wbcore_runtime/ imports wasmtime."""
    offenders = []
    for path in sorted(Path(wbcore_runtime.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "wasmtime"]
    assert offenders == []


#: wasmtime's API as a module handed in would be used: an attribute (or a name) the core has no
#: business touching, import or not (``wasmtime._bindings``, ``engine.increment_epoch()``).
ENGINE_API = frozenset({
    "_bindings", "increment_epoch", "epoch_interruption", "set_epoch_deadline", "define_wasi", "WasiConfig",
    "set_wasi", "preopen_dir", "stdout_custom", "stderr_custom", "wasm_exceptions", "ExitTrap", "TrapCode",
    "WasmtimeError", "define_func", "consume_fuel", "set_fuel",
})
#: Core modules still driving an engine: none (the caps bridge's guest side, which links ``wb.*``
#: imports, left for wbcore-wasmtime's ``sandbox_caps.py``, served to the tiers as a file).
ENGINE_API_PENDING: set[str] = set()


def test_the_core_uses_no_engine_api_by_attribute():
    """Not importing wasmtime is not enough: a module handed in (as ``wasm_guest.engine(wasmtime)``
    took one before the guest runner moved to wbcore-wasmtime) is driven through its attributes; no core
    module names one of wasmtime's."""
    offenders, pending = [], set()
    for path in sorted(Path(wbcore_runtime.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = node.attr if isinstance(node, ast.Attribute) else None
            if name in ENGINE_API:
                if path.name in ENGINE_API_PENDING:
                    pending.add(path.name)
                else:
                    offenders.append(
                        f"{path.relative_to(Path(wbcore_runtime.__file__).parent)}:{node.lineno}: .{name}")
    assert offenders == [], "the core drives an engine; serve it from a plugin through a hook record"
    assert pending == ENGINE_API_PENDING, (
        f"{ENGINE_API_PENDING - pending} drive no engine now: drop them from ENGINE_API_PENDING")


def test_linkable_decides_on_plain_import_names(dock):
    ctx = dock.context(principal=Principal("t", "x"), caps={"kv"})
    assert dock.linkable(["kv", "fetch", "info"], ctx) == ["kv"]
    assert dock.linkable(["info"], ctx) == []
    with pytest.raises(CapabilityDenied, match="not granted") as exc:
        dock.linkable(["vfs"], dock.context(principal=Principal("t", "x"), caps={"kv"}))
    assert exc.value.reason == "not-granted"
    with pytest.raises(CapabilityDenied, match="unknown cap 'teleport'"):
        dock.linkable(["teleport"], ctx)
    with pytest.raises(NotFound, match="queue"):
        dock.linkable(["queue"], dock.context(principal=Principal("t", "x"), caps={"queue"}))


def test_a_result_after_the_deadline_is_discarded_and_audited_as_timeout(dock):
    ctx = dock.context(principal=Principal("t", "late"), caps={"kv"}, timeout=0.05)
    with pytest.raises(Timeout, match="after the call's deadline"):
        dock.call(ctx, "kv", "slow", {"s": 0.2})
    last = _trail(dock.audit)[-1]
    assert (last["outcome"], last["kind"], last["reason"]) == ("denied", "timeout", "deadline")
    status, body = dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo"}))
    assert status == STATUS[ErrorKind.TIMEOUT] and cbor2.loads(body)["reason"] == "deadline"


def _bignum(n: int) -> bytes:
    """CBOR tag 2 over ``n`` bytes (a positive bignum whose top byte is set)."""
    return b"\xc2\x5a" + n.to_bytes(4, "big") + b"\xff" * n


def _timed_call(dock, request: bytes) -> tuple[int, bytes, float]:
    ctx = dock.context(principal=Principal("t"), caps={"kv"})
    t0 = time.monotonic()
    status, body = dock.call_raw(ctx, "kv", request)
    return status, body, time.monotonic() - t0


def test_a_request_cannot_make_the_host_compute(dock):
    """Tags that make the decoder compute or expand are refused while decoding, fast: a
    rational over two 120 KB bignums cost seconds of gcd (a 1 MB one, minutes) with the GIL
    held; colliding integer map keys made inserting quadratic; shared references (tags 28/29)
    made a few hundred bytes a 2^22-leaf tree the response encoder walked."""
    rational = b"\xa2\x62op\x64echo\x61a\xd8\x1e\x82" + _bignum(120_000) + _bignum(120_001)
    p = (1 << 61) - 1  # ints equal modulo p hash alike
    keys = b"".join(b"\xc2\x4c" + ((k + 1) * p << 16).to_bytes(12, "big") + b"\x00" for k in range(20_000))
    collide = b"\xa2\x62op\x64echo\x61a\xb9" + (20_000).to_bytes(2, "big") + keys
    levels = b"\xd8\x1c\x80" + b"".join(b"\xd8\x1c\x82\xd8\x1d" + bytes([i]) + b"\xd8\x1d" + bytes([i])
                                       for i in range(22))
    shared = b"\xa2\x62op\x64echo\x61a\x97" + levels
    for name, request in (("rational", rational), ("colliding keys", collide), ("shared refs", shared)):
        status, body, took = _timed_call(dock, request)
        assert status == STATUS[ErrorKind.INVALID_ARGS], name
        assert "CBOR" in cbor2.loads(body)["message"], name
        assert took < 1.0, f"{name}: {took:.1f} s"


def test_plain_cbor_still_passes(dock):
    ctx = dock.context(principal=Principal("t"), caps={"kv"})
    args = {"n": 1 << 70, "f": 1.5, "b": b"\x00", "l": [None, True, "x"], "m": {"k": [1]}}
    status, body = dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo", **args}))
    assert status == 0 and cbor2.loads(body) == {"echo": args}


def test_a_flood_of_refused_calls_cannot_rotate_the_audit_trail(make_runtime):
    """Every call counts against the rate (a malformed one, one outside guest memory), and a
    principal over its limit leaves one line per window: before, each refusal was a line, so
    a guest looping on a bad pointer wrote ~100k lines a second and pushed every principal's
    history out of the kept segments."""
    dock = make_runtime(plugins=[_TestBrokers()], env={"WB_DOCK_RATE": "5/60"}).dock
    ctx = dock.context(principal=Principal("t", "flood"), caps={"kv"})
    for _ in range(3):
        assert dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo"}))[0] == 0
    malformed = [dock.call_raw(ctx, "kv", b"\xff")[0] for _ in range(500)]
    outside = [dock.deny(ctx, "kv", InvalidArgs("kv: the request lies outside guest memory"))[0]
               for _ in range(500)]
    assert malformed[:2] == [STATUS[ErrorKind.INVALID_ARGS]] * 2
    assert set(malformed[2:] + outside) == {STATUS[ErrorKind.CAPABILITY_DENIED]}
    status, body = dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo"}))
    assert (status, cbor2.loads(body)["reason"]) == (STATUS[ErrorKind.CAPABILITY_DENIED], "rate-limited")
    reasons = [e["reason"] for e in _trail(dock.audit)]
    assert reasons == [None] * 3 + ["invalid-args"] * 2 + ["rate-limited"]


def test_a_request_over_the_cap_is_refused_before_it_is_hashed(dock, monkeypatch):
    """``call_raw`` refuses a request over ``MAX_REQUEST`` on its length alone: before, it hashed
    every byte first (64 MiB of sha256 for a request it was about to refuse). Its audit line
    names no digest, as the engines' refusal of such a length (``Dock.deny``) does; it still
    counts against the rate."""
    from wbcore_runtime.dispatch import dock as dock_module

    hashed: list[int] = []
    real = dock_module.digest
    monkeypatch.setattr(dock_module, "MAX_REQUEST", 16)
    monkeypatch.setattr(dock_module, "digest", lambda data: hashed.append(len(data)) or real(data))
    ctx = dock.context(principal=Principal("t"), caps={"kv"})
    status, body = dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo", "pad": "x" * 32}))
    assert status == STATUS[ErrorKind.INVALID_ARGS] and cbor2.loads(body)["reason"] == "too-large"
    assert hashed == []
    line = _trail(dock.audit)[-1]
    assert (line["outcome"], line["reason"], line["args"], line["bytes"]) == ("denied", "too-large", "", 47)
    assert dock.limiter.take("t") == 0 and dock.limiter._buckets["t"][1] == 2
    ok = cbor2.dumps({"op": "echo"})
    assert dock.call_raw(ctx, "kv", ok)[0] == 0 and hashed == [len(ok)]


def test_a_context_is_keyed_by_its_own_principal(dock):
    """The key the rate limit, revocation and audit use is taken once per context; a child
    context with another principal is keyed by that one, never by its parent's."""
    ctx = dock.context(principal=Principal("t", "a"), caps={"kv"})
    child = ctx.child(principal=Principal("u", "b"))
    assert (ctx.who, child.who) == ("t/a", "u/b")
    dock.revoke("u/b")
    assert dock.call_raw(ctx, "kv", cbor2.dumps({"op": "echo"}))[0] == 0
    assert dock.call_raw(child, "kv", cbor2.dumps({"op": "echo"}))[0] == STATUS[ErrorKind.CAPABILITY_DENIED]


def test_the_rate_limiter_keeps_only_the_principals_of_the_current_window(monkeypatch) -> None:
    from wbcore_runtime.dispatch import rate

    clock = [0.0]
    monkeypatch.setattr(rate.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(rate, "PRUNE_AT", 100)
    limiter = rate.RateLimiter(2, 1.0)
    for window in range(5):  # a long-running server: new principals every window
        clock[0] = window + 0.5
        for i in range(100):
            assert limiter.take(f"p{window}-{i}") == 0
    assert len(limiter._buckets) <= 200  # not 500: past windows' buckets were dropped
    assert limiter.take("p4-0") == 0 and limiter.take("p4-0") == 1  # the current window still counts
