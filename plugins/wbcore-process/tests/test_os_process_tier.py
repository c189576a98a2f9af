"""The os_process tier's conformance suite: a command in a warm sandboxed worker gives what
the instance tier gives, within the same limits, with its caps bridged to the host's Dock —
and the worker behind it refuses anything that is not its host speaking the protocol."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from wbcore_process.sandbox import probe

wasmtime = pytest.importorskip("wasmtime")
pytestmark = pytest.mark.skipif(not probe()[0], reason=f"sandbox unavailable here: {probe()[1]}")

from wbcore_runtime.contract.calls import CommandRequest, GuestTrap, LimitExceeded, Principal  # noqa: E402
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, Timeout  # noqa: E402
from wbcore_runtime.trust.policy import profile  # noqa: E402

from wbcore_testing import conformance  # noqa: E402
from wbcore_runtime.wire import frames  # noqa: E402
from wbcore_testing.conformance import (  # noqa: E402
    ARGS_WAT, BOMB_WAT, ECHO_WAT, FD_WRITE, FLOOD_WAT, PREOPEN_WAT, SPIN_WAT, STDERR_WAT, TRAP_WAT, cbor_data,
    command_request, kv_wat)
from wbcore_process.pool import Pool, spawn_worker  # noqa: E402
from wbcore_process.tiers import OsProcessTier  # noqa: E402

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0

REPO = Path(__file__).resolve().parents[3]
#: Sleeps 100 s inside a WASI call (where the epoch cannot stop it): only the watchdog can.
SLEEP_WAT = """(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i64.store (i32.const 24) (i64.const 100000000000))
    (drop (call $poll (i32.const 0) (i32.const 256) (i32.const 1) (i32.const 512)))))"""


@pytest.fixture
def rt(make_runtime):
    return make_runtime()


@pytest.fixture
def tiers(rt):
    """(instance, os_process) drivers on one runtime; os_process on the shared warm pool."""
    return rt.tiers.get("instance").factory(rt), OsProcessTier(rt)


def request(rt, wat: str, **kw) -> CommandRequest:
    return command_request(rt, wasmtime.wat2wasm(wat), **kw)


def outcome(tier, req):
    """What a call gives, comparable across tiers: the result, or the error's class and limit."""
    return conformance.outcome(lambda: tier.call(req))


def worker_pid(worker) -> int:
    """The worker's own pid (the child of its sandbox's pid 1)."""
    init = worker.box.init_pid
    children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    assert len(children) == 1
    return int(children[0])


# --- the same answers as the instance tier -------------------------------------------------------------


@pytest.mark.parametrize(("wat", "argv", "stdin", "mode"), [
    (ECHO_WAT, (), b"through a worker \x00\xff" * 1000, "argv"),
    (ECHO_WAT, (), b"", "argv"),
    (ECHO_WAT, ("-n", "x y"), b"rest", "stdin1"),
    (ARGS_WAT, ("one", "two words", "ünï"), b"", "argv"),
    (STDERR_WAT, (), b"", "argv"),
    (PREOPEN_WAT, (), b"", "argv"),
    (TRAP_WAT, (), b"", "argv"),
], ids=["echo", "empty", "stdin1", "argv", "stderr-exit", "no-preopen", "trap"])
def test_output_equals_the_instance_tier(rt, tiers, wat, argv, stdin, mode) -> None:
    req = request(rt, wat, argv=argv, stdin=stdin, arg_mode=mode)
    instance, osp = tiers
    want = outcome(instance, req)
    assert outcome(osp, req) == want
    assert outcome(osp, req) == want  # and again on a warm worker that has the module


def test_the_shipped_b64_toolkit_matches_the_instance_tier(make_runtime, toolkit_root) -> None:
    from wbcore_runtime.build import builder

    shutil.copytree(REPO / "toolkits" / "b64", toolkit_root / "b64")
    rt = make_runtime()
    builder.build(rt, "b64")
    data = bytes(range(256)) * 40 + b"tail"
    encoded = rt.call("b64", [], data)
    assert rt.call("b64", [], data, tier="os_process").stdout == encoded.stdout
    for tier in ("instance", "os_process"):
        res = rt.call("b64", ["decode"], encoded.stdout, tier=tier)
        assert (res.exit_code, res.stdout) == (0, data)
    bad_inst = rt.call("b64", ["decode"], b"@@not base64@@")
    bad_osp = rt.call("b64", ["decode"], b"@@not base64@@", tier="os_process")
    assert ((bad_osp.exit_code, bad_osp.stdout, bad_osp.stderr)
            == (bad_inst.exit_code, bad_inst.stdout, bad_inst.stderr))


def test_calls_reuse_warm_workers(rt, tiers) -> None:
    _, osp = tiers
    req = request(rt, ECHO_WAT, stdin=b"warm")
    osp.call(req)
    before = {w.pid for w in osp.pool.workers()}
    t0 = time.perf_counter()
    for _ in range(20):
        assert osp.call(req).stdout == b"warm"
    assert {w.pid for w in osp.pool.workers()} == before
    assert time.perf_counter() - t0 < 5.0  # warm calls, not 20 process starts


def test_concurrent_calls_each_get_a_worker(rt, tiers) -> None:
    _, osp = tiers
    results: list[bytes] = []

    def one(i: int) -> None:
        results.append(osp.call(request(rt, ECHO_WAT, stdin=f"call {i}".encode())).stdout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == sorted(f"call {i}".encode() for i in range(6))
    assert len(osp.pool.workers()) <= osp.pool.limit


# --- limits ------------------------------------------------------------------------------------


def test_an_infinite_loop_ends_at_its_deadline(rt, tiers) -> None:
    _, osp = tiers
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="over its 1 s deadline"):
        osp.call(request(rt, SPIN_WAT, timeout_s=1.0))
    assert time.monotonic() - t0 <= 2.0
    assert osp.call(request(rt, ECHO_WAT, stdin=b"after")).stdout == b"after"


def test_a_guest_blocked_in_a_host_call_is_killed_by_the_watchdog(rt, tiers) -> None:
    _, osp = tiers
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="worker was killed"):
        osp.call(request(rt, SLEEP_WAT, timeout_s=1.0))
    assert time.monotonic() - t0 <= 2.0
    assert osp.call(request(rt, ECHO_WAT, stdin=b"replaced")).stdout == b"replaced"


def test_a_memory_bomb_hits_the_profiles_limit(rt, tiers) -> None:
    instance, osp = tiers
    req = request(rt, BOMB_WAT)
    assert outcome(osp, req) == outcome(instance, req) == ("LimitExceeded", "memory")
    with pytest.raises(LimitExceeded, match="64 MiB memory limit of profile compute"):
        osp.call(req)


def test_an_output_flood_is_stopped_at_the_cap(rt, tiers) -> None:
    instance, osp = tiers
    req = request(rt, FLOOD_WAT)
    t0 = time.monotonic()
    assert outcome(osp, req) == outcome(instance, req) == ("LimitExceeded", "stdout")
    assert time.monotonic() - t0 < 4.0  # stopped at the cap, not at the deadline


def test_a_trap_and_a_missing_start_are_reported_as_at_instance(rt, tiers) -> None:
    _, osp = tiers
    with pytest.raises(GuestTrap, match="unreachable"):
        osp.call(request(rt, TRAP_WAT))
    with pytest.raises(InvalidArgs, match="exports no _start"):
        osp.call(request(rt, '(module (memory (export "memory") 1))'))
    bogus = request(rt,
                    '(module (import "wasi_snapshot_preview1" "no_such_call" (func)) (func (export '
                    '"_start")))')
    with pytest.raises(InvalidArgs, match="cannot link"):
        osp.call(bogus)
    assert outcome(osp, bogus) == outcome(tiers[0], bogus)


def test_a_cancelled_call_ends_promptly(rt, tiers) -> None:
    _, osp = tiers
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="cancelled"):
        osp.call(request(rt, SLEEP_WAT, timeout_s=5.0, cancel=cancel))
    assert time.monotonic() - t0 < 0.3 + SLACK_S  # and short of the 5 s deadline


# --- what the worker is: no network, no host files, no privileges ------------------------------


def test_the_worker_has_no_network_no_host_files_and_no_privileges(rt, tiers, tmp_path: Path) -> None:
    _, osp = tiers
    osp.call(request(rt, ECHO_WAT))
    pid = worker_pid(osp.pool.workers()[0])
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    devices = [ln.split(":")[0].strip() for ln in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
    assert devices == ["lo"]  # and it is down: nothing to reach, not even loopback
    assert Path(f"/proc/{pid}/net/tcp").read_text().count("\n") == 1
    status = dict(ln.split(":", 1)
                  for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in ln)
    assert status["NoNewPrivs"].strip() == "1" and int(status["CapEff"], 16) == 0
    assert status["Uid"].split()[0] != "0"
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not read")
    try:
        visible = (os.path.exists(f"/proc/{pid}/root{secret}")
                   or os.path.exists(f"/proc/{pid}/root/etc/passwd"))
    except PermissionError:
        pytest.skip("cannot look into the worker's root from here")
    assert not visible
    assert not os.path.exists(f"/proc/{pid}/root{rt.home}")


# --- caps are bridged ---------------------------------------------------------------------------


def test_a_kv_round_trip_from_a_guest_at_os_process(rt, tiers) -> None:
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    instance, osp = tiers
    put = cbor2.dumps({"op": "put", "key": "k", "value": b"from the worker"})
    get = cbor2.dumps({"op": "get", "key": "k"})
    req = request(rt, kv_wat(put, get), profile=profile("minimal"), caps=frozenset({"kv"}))
    res = osp.call(req)
    assert res.exit_code == 0, res.stderr
    assert cbor2.loads(res.stdout) == {"value": b"from the worker"}
    # The worker holds nothing: the value lives in the host's kv, under the call's principal.
    ctx = rt.dock.context(principal=req.principal, caps={"kv"}, timeout=5)
    assert rt.dock.call(ctx, "kv", "get", {"key": "k"}) == {"value": b"from the worker"}
    rt.dock.call(ctx, "kv", "put", {"key": "k", "value": b"from the host"})
    only_get = request(rt, kv_wat(get), profile=profile("minimal"), caps=frozenset({"kv"}))
    assert (osp.call(only_get).stdout == instance.call(only_get).stdout
            == cbor2.dumps({"value": b"from the host"}))
    # A Dock refusal reaches the guest as a status, the same at both tiers (invalid-args → 2).
    bad = request(rt, kv_wat(cbor2.dumps({"op": "teleport"})), profile=profile("minimal"),
                  caps=frozenset({"kv"}))
    assert outcome(osp, bad) == outcome(instance, bad)
    assert outcome(osp, bad)[2] == 2


def test_the_two_call_protocol_and_wb_info_cross_the_bridge(rt, tiers) -> None:
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    instance, osp = tiers
    get = cbor2.dumps({"op": "get", "key": "big"})
    wat = f"""(module {FD_WRITE}
      (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (import "wb" "info" (func $info (param i32 i32) (result i64)))
      (memory (export "memory") 4)
      (data (i32.const 64) "{cbor_data(get)}")
      (func (export "_start") (local $n i64)
        (drop (call $kv (i32.const 64) (i32.const {len(get)}) (i32.const 4096) (i32.const 0)))
        (local.set $n (call $fetch (i32.const 4096) (i32.const 100000)))
        (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
        (local.set $n (call $info (i32.const 131072) (i32.const 4096)))
        (i32.store (i32.const 0) (i32.const 131072)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
        (drop (call $w (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))))"""
    req = request(rt, wat, profile=profile("minimal"), caps=frozenset({"kv"}))
    ctx = rt.dock.context(principal=req.principal, caps={"kv"}, timeout=5)
    rt.dock.call(ctx, "kv", "put", {"key": "big", "value": b"x" * 50_000})
    res, want = osp.call(req), instance.call(req)
    assert res.stdout == want.stdout == cbor2.dumps({"value": b"x" * 50_000})
    info = cbor2.loads(res.stderr)
    assert (info["principal"], info["caps"], info["depth"]) == ("default/guest", ["kv"], 0)
    assert {k: v for k, v in info.items() if k != "instance"} == {
        k: v for k, v in cbor2.loads(want.stderr).items() if k != "instance"}


def test_a_revoked_principal_is_refused_through_the_bridge(rt, tiers) -> None:
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    _, osp = tiers
    req = request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})), profile=profile("minimal"),
                  caps=frozenset({"kv"}), principal=Principal(toolkit="revoked"))
    rt.dock.revoke(req.principal)
    assert osp.call(req).exit_code == 4  # capability-denied, as the guest sees it


def test_the_deadline_holds_while_a_broker_blocks(rt, tiers) -> None:
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    class Stuck:
        def handle(self, call):
            time.sleep(4)
            return {"value": b"too late"}

    _, osp = tiers
    rt.dock.set_driver("kv", Stuck())
    req = request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})), profile=profile("minimal"),
                  caps=frozenset({"kv"}), timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="over its 1 s deadline"):
        osp.call(req)
    assert time.monotonic() - t0 <= 2.0


def test_an_ungranted_cap_does_not_instantiate(rt, tiers) -> None:
    import cbor2

    instance, osp = tiers
    req = request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})))
    with pytest.raises(CapabilityDenied, match=r"imports cap 'kv' \(wb.kv\) which is not granted") as at_osp:
        osp.call(req)
    with pytest.raises(CapabilityDenied) as at_instance:
        instance.call(req)
    assert at_osp.value.message == at_instance.value.message
    other = request(rt,
                    '(module (import "env" "system" (func)) (memory (export "memory") 1) (func (export '
                    '"_start")))')
    with pytest.raises(CapabilityDenied, match="env.system"):
        osp.call(other)


def test_nested_commands_at_os_process_each_get_a_worker(make_runtime, toolkit_root, wbx,
                                                         monkeypatch) -> None:
    """A third-party guest at os_process calls itself through exec (the host's Dock runs the
    nested command, which resolves to os_process again): 9 workers busy at once, depth 8."""
    pytest.importorskip("wbcore_brokers_exec",
                        reason="the exec broker (wbcore-brokers-exec) is not installed")
    import base64

    import cbor2

    from wbcore_runtime.build import builder
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(bytes(range(32))).decode())
    req = cbor2.dumps({"op": "run", "name": "nest"})
    wat = f"""(module {FD_WRITE}
      (import "wb" "exec" (func $call (param i32 i32 i32 i32) (result i64)))
      (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
      (memory (export "memory") 64)
      (data (i32.const 64) "{cbor_data(req)}")
      (func (export "_start") (local $n i64)
        (local.set $n (call $call (i32.const 64) (i32.const {len(req)}) (i32.const 65536) (i32.const 3000000)))
        (if (i64.lt_s (local.get $n) (i64.const 0)) (then (local.set $n (call $fetch (i32.const 65536) (i32.const 3000000)))))
        (i32.store (i32.const 0) (i32.const 65536)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""  # noqa: E501
    fields = {"BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": "nest"}
    write_toolkit(toolkit_root, "nest",
                  manifest_text("nest", exec="command", caps="exec", trust="third-party",
                                                      extra=fields), files={"src/main.wat": wat})
    rt = make_runtime()
    assert wbx("toolkit", "sign", "nest", runtime=rt).exit_code == 0
    rt.discover(refresh=True)
    builder.build(rt, "nest")
    assert wbx("toolkit", "grant", "nest", "exec", runtime=rt).exit_code == 0
    assert rt.resolve("command", "nest").tier.name == "os_process"
    from wbcore_runtime.dispatch import resolve as resolution

    pool = Pool(9, caps_lib())  # a private pool, warmed first: nine calls are in flight at the deepest point
    rt.__dict__.setdefault("_wb_tier_drivers", {})["os_process"] = OsProcessTier(rt, pool)
    resolution.forget(rt)
    try:
        OsProcessTier(rt, pool).call(request(rt, ECHO_WAT))
        deadline = time.monotonic() + 60
        while len(pool.workers()) < 9 and time.monotonic() < deadline:
            time.sleep(0.05)
        warm = set(pool.workers())
        out, levels = rt.call("nest").stdout, 0
        while "error" not in (doc := cbor2.loads(out)):
            levels += 1
            out = doc["stdout"]
        assert levels == 8
        assert doc["reason"] == "depth" and "exceeds 8" in doc["message"]
        assert set(pool.workers()) == warm  # the nine warm workers served every level
        assert sum(w.calls for w in warm) == 1 + 9
    finally:
        pool.close()


# --- the worker refuses anything but its host ----------------------------------------------------


@pytest.fixture
def raw_worker():
    """A worker spawned outside any pool, spoken to frame by frame."""
    worker = spawn_worker(caps_lib())
    yield worker
    worker.close()


def recv(worker, timeout: float = 10.0) -> tuple[int, bytes]:
    import select

    ready, _, _ = select.select([worker.box.stdout_fd], [], [], timeout)
    assert ready, "the worker did not answer"
    return worker.chan.recv()


def refusal(worker) -> dict:
    kind, payload = recv(worker)
    assert kind == frames.REFUSED, frames.name(kind)
    return frames.unpack(payload)[0]


def test_a_handshake_without_the_secret_is_refused(raw_worker) -> None:
    raw_worker.chan.send_frame(frames.ping(bytes(32)))
    assert refusal(raw_worker)["reason"] == "secret"
    assert raw_worker.box.wait(timeout=5) == 3  # no session: the worker ends


def test_requests_without_or_with_a_wrong_secret_are_refused(raw_worker) -> None:
    w = raw_worker
    w.chan.send_frame(frames.ping(w.secret))
    assert recv(w)[0] == frames.PONG
    exec_obj = {"id": 1, "sha256": "0" * 64, "argv": ["x"], "memory": 1 << 20, "timeout_s": 1,
                "stdout_cap": 10, "stderr_cap": 10}
    w.chan.send(frames.EXEC, frames.pack(exec_obj, b""))  # no secret at all
    assert refusal(w) == {"reason": "secret", "message": "Exec carries no session secret; refused",
                          "blobs": []}
    w.chan.send_frame(frames.seal(frames.EXEC, frames.new_secret(), exec_obj, b""))
    assert refusal(w)["reason"] == "secret"
    w.chan.send_frame(frames.shutdown(bytes(32)))
    assert refusal(w)["reason"] == "secret"
    w.chan.send_frame(frames.ping(bytes(32)))
    assert refusal(w)["reason"] == "secret"
    # ... and the worker still serves its host: the right secret is answered.
    w.chan.send_frame(frames.seal(frames.EXEC, w.secret, exec_obj, b""))
    kind, payload = recv(w)
    assert kind == frames.EXEC_RESULT and frames.unpack(payload)[0]["missing"] is True
    w.chan.send_frame(frames.shutdown(w.secret))
    assert w.box.wait(timeout=5) == 0


@pytest.mark.parametrize("bad", [
    frames.encode(frames.EXEC, b"\x03\x00\x00\x00{x}"),
    frames.encode(frames.EXEC, b"\xff"),
    frames.encode(frames.EXEC, frames.pack({"secret": "zz"})),
    frames.encode(frames.BROKER_ANSWER, frames.pack({"id": 1})),
    frames.encode(frames.PONG, b"\x01\x00"),
    "exec-out-of-range",
], ids=["bad-json", "short", "bad-hex-secret", "answer-outside-a-call", "pong-to-a-worker",
        "exec-out-of-range"])
def test_malformed_frames_are_refused_and_the_worker_lives_on(raw_worker, bad: bytes) -> None:
    w = raw_worker
    w.chan.send_frame(frames.ping(w.secret))
    assert recv(w)[0] == frames.PONG
    if bad == "exec-out-of-range":
        bad = frames.seal(frames.EXEC, w.secret, {"id": 1, "sha256": "0" * 64, "argv": [], "memory": 10**400,
                                                   "timeout_s": 10**400, "stdout_cap": 1, "stderr_cap": 1},
                          b"")
    w.chan.send_frame(bad)
    assert refusal(w)["reason"] in ("malformed", "secret", "unexpected")
    w.chan.send_frame(frames.ping(w.secret))
    assert recv(w)[0] == frames.PONG


@pytest.mark.parametrize("bad", [
    (frames.MAX_FRAME + 1).to_bytes(4, "little") + bytes([frames.EXEC]),
    (5).to_bytes(4, "little") + b"\x99hello",
], ids=["oversize-length", "unknown-type"])
def test_a_broken_stream_is_refused_and_ends_the_worker_cleanly(raw_worker, bad: bytes) -> None:
    w = raw_worker
    w.chan.send_frame(frames.ping(w.secret))
    assert recv(w)[0] == frames.PONG
    os.write(w.box.stdin_fd, bad)
    assert refusal(w)["reason"] in ("too-large", "unknown-type")
    assert w.box.wait(timeout=5) == 3
    assert "Traceback" not in w.stderr_tail()


def test_a_worker_that_breaks_the_protocol_ends_the_call_and_is_replaced(rt) -> None:
    pool = Pool(1, caps_lib())
    osp = OsProcessTier(rt, pool)
    try:
        assert osp.call(request(rt, ECHO_WAT, stdin=b"1")).stdout == b"1"
        (first,) = pool.workers()
        first.chan.send_frame(frames.ping(first.secret))  # an extra Pong will greet the next call
        with pytest.raises(Internal, match="worker died .*sent Pong during a call"):
            osp.call(request(rt, ECHO_WAT, stdin=b"2"))
        assert osp.call(request(rt, ECHO_WAT, stdin=b"3")).stdout == b"3"
        assert first not in pool.workers()
    finally:
        pool.close()


def test_a_call_that_fails_on_the_host_mid_conversation_retires_its_worker(rt, monkeypatch) -> None:
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    pool = Pool(1, caps_lib())
    osp = OsProcessTier(rt, pool)
    try:
        osp.call(request(rt, ECHO_WAT))
        (first,) = pool.workers()

        def broken_context(**kw):
            raise Internal("the host failed while the worker waited for its LinkAnswer")

        monkeypatch.setattr(rt.dock, "context", broken_context)
        with pytest.raises(Internal, match="waited for its LinkAnswer"):
            osp.call(request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})), caps=frozenset({"kv"})))
        monkeypatch.undo()
        assert osp.call(request(rt, ECHO_WAT, stdin=b"fresh")).stdout == b"fresh"
        (second,) = pool.workers()
        assert second is not first
        too_big = request(rt, ECHO_WAT, stdin=bytes(frames.MAX_FRAME))
        with pytest.raises(InvalidArgs, match="frame cap"):
            osp.call(too_big)  # refused before anything was sent: the worker stays
        assert osp.call(request(rt, ECHO_WAT, stdin=b"same")).stdout == b"same"
        assert pool.workers() == [second]
    finally:
        pool.close()


# --- crashed and killed workers are replaced ----------------------------------------------------


def test_a_killed_idle_worker_is_replaced(rt) -> None:
    pool = Pool(1, caps_lib())
    osp = OsProcessTier(rt, pool)
    try:
        assert osp.call(request(rt, ECHO_WAT, stdin=b"a")).stdout == b"a"
        (first,) = pool.workers()
        os.kill(worker_pid(first), 9)
        first.box.wait(timeout=5)
        assert osp.call(request(rt, ECHO_WAT, stdin=b"b")).stdout == b"b"
        assert first not in pool.workers() and len(pool.workers()) == 1
    finally:
        pool.close()


def test_a_worker_killed_mid_call_fails_that_call_clearly(rt) -> None:
    pool = Pool(1, caps_lib())
    osp = OsProcessTier(rt, pool)
    try:
        osp.call(request(rt, ECHO_WAT))
        (first,) = pool.workers()
        threading.Timer(0.5, os.kill, (worker_pid(first), 9)).start()
        t0 = time.monotonic()
        with pytest.raises(Internal, match="os_process worker died"):
            osp.call(request(rt, SPIN_WAT, timeout_s=10.0))
        assert time.monotonic() - t0 < 5.0
        assert osp.call(request(rt, ECHO_WAT, stdin=b"next")).stdout == b"next"
    finally:
        pool.close()


def test_workers_outlive_the_thread_that_first_needed_them(rt) -> None:
    # The sandbox's init dies with the *thread* that started it (PR_SET_PDEATHSIG): workers
    # must be started on the pool's own thread, not on a caller's short-lived one.
    pool = Pool(1, caps_lib())
    osp = OsProcessTier(rt, pool)
    try:
        caller = threading.Thread(target=lambda: osp.call(request(rt, ECHO_WAT)))
        caller.start()
        caller.join(30)
        (first,) = pool.workers()
        time.sleep(0.3)
        assert first.box.alive()
        assert osp.call(request(rt, ECHO_WAT, stdin=b"same")).stdout == b"same"
        assert pool.workers() == [first]
    finally:
        pool.close()


def test_a_closed_pool_shuts_its_workers_down(rt) -> None:
    pool = Pool(2, caps_lib())
    osp = OsProcessTier(rt, pool)
    osp.call(request(rt, ECHO_WAT))
    deadline = time.monotonic() + 10
    while len(pool.workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = pool.workers()
    pool.close()
    assert all(w.box.wait(timeout=5) is not None for w in workers)
    with pytest.raises(Internal, match="shut down"):
        osp.call(request(rt, ECHO_WAT))


def test_the_pool_size_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from wbcore_process import pool as pool_mod

    monkeypatch.setattr(pool_mod, "_pool", None)
    assert pool_mod.shared({"WB_OS_PROCESS_WORKERS": "3"}, caps_lib()).size == 3
    monkeypatch.setattr(pool_mod, "_pool", None)
    with pytest.raises(InvalidArgs, match="WB_OS_PROCESS_WORKERS"):
        pool_mod.shared({"WB_OS_PROCESS_WORKERS": "many"}, caps_lib())
    monkeypatch.setattr(pool_mod, "_pool", None)
    with pytest.raises(InvalidArgs, match=r"1\.\.16"):
        pool_mod.shared({"WB_OS_PROCESS_WORKERS": "0"}, caps_lib())


def test_worker_scratch_folders_are_removed_and_a_dead_owners_swept(rt, tmp_path, monkeypatch) -> None:
    """100 calls (some ending at their deadline, so their worker is killed) leave no
    ``wb-spawn-*`` folder once the pool closes; a dead process's folder is swept when a
    pool starts."""
    from wbcore_process import pool as pool_mod
    from wbcore_runtime.store import leftovers

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dead = tmp_path / "wb-spawn-999999999-1-deadbeef"  # no such pid: its owner is gone
    (dead / "root").mkdir(parents=True)
    mine = tmp_path / "wb-spawn-unrelated"  # no owner in the name: never touched
    mine.mkdir()
    pool_mod.shutdown()
    tier = OsProcessTier(rt)
    try:
        assert dead.exists()
        for i in range(100):
            req = request(rt, SPIN_WAT if i % 25 == 0 else ECHO_WAT, stdin=b"x", timeout_s=0.3)
            conformance.outcome(lambda req=req: tier.call(req))
            if i == 0:
                assert not dead.exists() and mine.exists()  # swept when the pool started
        live = [p for p in tmp_path.iterdir() if p.name.startswith(f"wb-spawn-{leftovers.owner_tag()}")]
        assert len(live) <= pool_mod.shared(None, caps_lib()).size, live  # only the warm workers' own
    finally:
        pool_mod.shutdown()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f"wb-spawn-{leftovers.owner_tag()}")]


def test_the_session_secret_is_in_no_process_environment(raw_worker) -> None:
    """The secret arrives on an inherited pipe read and closed at start (issue 22 item 5):
    /proc/<pid>/environ of the worker and of its sandbox's pid 1 hold no trace of it."""
    w = raw_worker
    w.chan.send_frame(frames.ping(w.secret))
    assert recv(w)[0] == frames.PONG  # it read the secret from the pipe
    pid = worker_pid(w)
    for p in (pid, w.box.init_pid):
        environ = Path(f"/proc/{p}/environ").read_bytes()
        assert w.secret.hex().encode() not in environ and w.secret not in environ
        assert b"SECRET=" not in environ.replace(b"WB_SECRET_FD=", b"")


def caps_lib() -> Path:
    """The caps bridge's guest side, as the tier takes it: served by the WASI guest runner's plugin."""
    import tempfile

    from wbcore_runtime.contract import guest
    from wbcore_runtime.runtime import Runtime

    with tempfile.TemporaryDirectory() as home:
        return guest.sandbox_caps(Runtime.open(plugins=["wasmtime"], home=home), "os_process")
