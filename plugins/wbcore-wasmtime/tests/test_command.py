"""The command shape: fresh store per call, WASI with nothing inherited, limits enforced."""

from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import ARGS_ENV, BOMB, ECHO, EXIT3, FLOOD, LOOP, TRAP, WANTS_CAP, WANTS_ENV, wasi

from wbcore_runtime.store.artifacts import IntegrityError
from wbcore_runtime.contract.calls import GuestTrap, LimitExceeded
from wbcore_runtime.contract.errors import CapabilityDenied, NotFound, Timeout


def test_builtin_upper_is_real_wasm(rt):
    res = rt.call("upper", [], b"hello, World\n")
    assert res.stdout == b"HELLO, WORLD\n" and res.exit_code == 0
    entry = rt.registry.get("command", "upper")
    assert entry.builtin and rt.artifacts.path(entry.sha256).read_bytes()[:4] == b"\0asm"
    assert res.usage.peak_memory == 2 * 65536 and res.usage.bytes_out == 13 and res.usage.wall_s > 0


def test_stdin_to_stdout_and_large_input(rt, register):
    register("echo", ECHO)
    data = os.urandom(300_000)
    assert rt.call("echo", [], data).stdout == data
    assert rt.call("echo", [], b"").stdout == b""


def test_exit_code_and_stderr_pass_through(rt, register):
    register("exit3", EXIT3)
    res = rt.call("exit3")
    assert (res.exit_code, res.stderr, res.stdout) == (3, b"oops\n", b"")


def test_no_environment_and_argv(rt, register, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    register("argsenv", ARGS_ENV)
    assert rt.call("argsenv", ["a", "b"]).stdout == b"30"  # argv0 + 2 args, 0 env vars


def test_stdin1_first_line_is_the_argument(rt, register):
    register("echo1", ECHO, arg_mode="stdin1")
    assert rt.call("echo1", ["foo", "bar"], b"body\n").stdout == b"foo bar\nbody\n"


def test_fresh_store_per_call(rt, register):
    # a module with a mutable global counter: every call sees it at its initial value
    register("count", """(module (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
      (memory (export "memory") 1) (global $g (mut i32) (i32.const 48))
      (func (export "_start")
        (global.set $g (i32.add (global.get $g) (i32.const 1)))
        (i32.store8 (i32.const 100) (global.get $g))
        (i32.store (i32.const 0) (i32.const 100)) (i32.store (i32.const 4) (i32.const 1))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))""")  # noqa: E501
    assert [rt.call("count").stdout for _ in range(3)] == [b"1", b"1", b"1"]


def test_infinite_loop_stops_within_deadline_and_host_carries_on(rt, register):
    register("spin", LOOP)
    with pytest.raises(Timeout):
        rt.call("spin", timeout=0.05)  # compiles the module: not part of the guest's deadline
    ticks = []
    late = [0.0]  # how late this machine wakes a sleeping thread: the slack a deadline needs
    stop = threading.Event()

    def host_work() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            t = time.perf_counter()
            time.sleep(0.01)
            late[0] = max(late[0], time.perf_counter() - t - 0.01)

    t = threading.Thread(target=host_work)
    t.start()
    try:
        t0 = time.perf_counter()
        with pytest.raises(Timeout) as info:
            rt.call("spin", timeout=0.5)
        took = time.perf_counter() - t0
    finally:
        stop.set()
        t.join()
    assert 0.5 <= took <= 0.55 + late[0], (took, late[0])
    assert info.value.exit_code == 124 and "deadline" in info.value.message
    assert len(ticks) >= 10  # the other thread kept running while the guest spun
    assert rt.call("upper", [], b"ok").stdout == b"OK"  # and the runtime still works


def test_memory_bomb_traps_cleanly(rt, register):
    register("bomb", BOMB)
    with pytest.raises(LimitExceeded) as info:
        rt.call("bomb")
    assert info.value.limit == "memory" and "64 MiB" in info.value.message


def test_output_flood_is_capped(rt, register):
    register("flood", FLOOD)
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as info:
        rt.call("flood")
    assert info.value.limit == "stdout" and "16777216-byte cap" in info.value.message
    assert time.perf_counter() - t0 < 2.0


def test_trap_is_a_guest_trap(rt, register):
    register("div0", TRAP)
    with pytest.raises(GuestTrap, match="divide by zero"):
        rt.call("div0")


def test_ungranted_cap_and_foreign_imports_are_denied(rt, register):
    register("kvuser", WANTS_CAP)
    with pytest.raises(CapabilityDenied, match="'kv'"):
        rt.call("kvuser")
    register("native", WANTS_ENV)
    with pytest.raises(CapabilityDenied, match="env.system"):
        rt.call("native")


def test_unknown_command_lists_known(rt, register):
    register("echo", ECHO)
    with pytest.raises(NotFound, match="known: echo"):
        rt.call("ehco")


def test_tampered_artifact_never_runs(rt, register):
    entry = register("echo", ECHO)
    assert rt.call("echo", [], b"x").stdout == b"x"
    path = rt.artifacts.path(entry.sha256)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="does not match its sha256"):
        rt.call("echo", [], b"x")
    # a fresh process state (no module cache) refuses it too, before compiling
    from wbcore_wasmtime import engine

    engine.modules().clear()
    with pytest.raises(IntegrityError):
        rt.call("echo", [], b"x")


def test_call_hooks_fire(rt, register):
    seen = []

    class Spy:
        from wbcore_runtime import hookimpl

        @hookimpl
        def wbcore_call_started(self, call):
            seen.append(("start", call.name, call.shape))

        @hookimpl
        def wbcore_call_finished(self, call, result):
            seen.append(("end", call.name, type(result).__name__))

    rt.register_plugin(Spy())
    register("spin", LOOP)
    rt.call("upper", [], b"a")
    with pytest.raises(Timeout):
        rt.call("spin", timeout=0.05)
    assert seen == [("start", "upper", "command"), ("end", "upper", "CallResult"),
                    ("start", "spin", "command"), ("end", "spin", "Timeout")]


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_100_bad_calls_leave_rss_flat(rt, register):
    register("spin", LOOP)
    register("bomb", BOMB)
    register("flood", FLOOD)
    register("div0", TRAP)

    def bad(i: int) -> None:
        name = ("spin", "bomb", "flood", "div0")[i % 4]
        with pytest.raises((Timeout, LimitExceeded, GuestTrap)):
            rt.call(name, timeout=0.02)

    for i in range(20):  # warm up: caches, allocator arenas
        bad(i)
    before = _rss()
    for i in range(100):
        bad(i)
    grown = _rss() - before
    assert grown < 16 << 20, f"RSS grew by {grown >> 20} MiB over 100 bad calls"


def test_dock_imports_are_linked_through_the_seam(rt, register):
    """``wb.info`` (always linked, grants nothing) reaches the Dock with this call's context."""
    import cbor2

    register("whoami", """(module
      (import "wb" "info" (func $info (param i32 i32) (result i64)))
      (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
      (memory (export "memory") 1)
      (func (export "_start") (local $n i32)
        (local.set $n (i32.wrap_i64 (call $info (i32.const 1024) (i32.const 4096))))
        (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (local.get $n))
        (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))""")
    from wbcore_runtime.contract.calls import Principal

    res = rt.call("whoami", principal=Principal(tenant="acme", toolkit="tk"))
    info = cbor2.loads(res.stdout)
    assert info["principal"] == "acme/tk" and info["caps"] == []


def test_a_stale_builtin_is_rebuilt_on_first_use(make_runtime, register, rt):
    import wasmtime

    from wbcore_runtime.store.registry import Entry

    # an "old version" of upper: echo, registered as the built-in
    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(ECHO)))
    rt.registry.register(Entry("command", "upper", art.sha256, "command", builtin=True,
                               options={"version": "old"}))
    fresh = make_runtime(plugins=["wasmtime"])
    assert fresh.call("upper", [], b"abc").stdout == b"ABC"
    assert fresh.registry.get("command", "upper").options["version"].startswith("wat-")


def _spin_in_child(home: str, queue) -> None:  # type: ignore[no-untyped-def]
    from wbcore_runtime.runtime import Runtime

    rt = Runtime.open(plugins=["wasmtime"], home=home)
    try:
        rt.call("spin", timeout=0.2)
        queue.put("ran")
    except Timeout:
        queue.put("timeout")


def test_a_forked_child_still_stops_runaway_guests(rt, register):
    import multiprocessing

    register("spin", LOOP)
    with pytest.raises(Timeout):
        rt.call("spin", timeout=0.05)  # the parent's engine and ticker exist before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_spin_in_child, args=(str(rt.home), queue))
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child's guest was never stopped")
    assert queue.get(timeout=1) == "timeout"


def test_wbx_run_maps_each_limit_to_its_exit_code(rt, register, wbx):
    register("spin", LOOP)
    register("bomb", BOMB)
    register("kvuser", WANTS_CAP)
    register("exit3", EXIT3)
    r = wbx("run", "--timeout", "0.1", "spin", runtime=rt, input=b"")
    assert r.exit_code == 124 and r.stderr.startswith("wbx: timeout: spin: stopped after")
    r = wbx("run", "bomb", runtime=rt, input=b"")
    assert r.exit_code == 70 and "memory limit" in r.stderr
    r = wbx("run", "kvuser", runtime=rt, input=b"")
    assert r.exit_code == 126 and "'kv'" in r.stderr
    r = wbx("run", "exit3", runtime=rt, input=b"")
    assert (r.exit_code, r.stderr) == (3, "oops\n")


def test_a_command_run_from_inside_a_command_keeps_both_outputs(make_runtime, make_toolkit):
    """A host import (here a test broker for the ``commands`` cap) may run another command
    on the same thread while the outer guest is mid-call: each keeps its own stdout."""
    import wasmtime

    from wbcore_runtime.build import builder
    from wbcore_runtime import hookimpl
    from wbcore_runtime.contract.records import Broker

    inner: list[bytes] = []

    class Runs:
        def __init__(self, runtime):
            self.runtime = runtime

        def handle(self, call):
            out = self.runtime.call("upper", [], b"inner").stdout
            inner.append(out)
            return out.decode()

    class TestBroker:
        @hookimpl
        def wbcore_brokers(self):
            yield Broker(name="commands", summary="test: run a command", factory=Runs)

    make_toolkit("outer", exec="command", caps="commands", extra={"CLI_BIN": "outer"})
    rt = make_runtime(plugins=["wasmtime", TestBroker()])
    wat = f"""(module
      (import "wb" "commands" (func $run (param i32 i32 i32 i32) (result i64)))
      {wasi("fd_write")}
      (memory (export "memory") 1)
      (data (i32.const 100) "\\a1\\62op\\63run")
      (data (i32.const 200) "AB")
      (func $out (param $p i32) (param $n i32)
        (i32.store (i32.const 0) (local.get $p)) (i32.store (i32.const 4) (local.get $n))
        (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
      (func (export "_start")
        (call $out (i32.const 200) (i32.const 1))
        (drop (call $run (i32.const 100) (i32.const 8) (i32.const 1024) (i32.const 256)))
        (call $out (i32.const 201) (i32.const 1))))"""
    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat)))
    make_toolkit("outer", exec="command", caps="commands", extra={"CLI_BIN": "outer", "PROFILE": "minimal"})
    rt.discover(refresh=True)
    builder.register_artifact(rt, "outer", art.sha256)
    res = rt.call("outer")
    assert inner == [b"INNER"]
    assert (res.exit_code, res.stdout) == (0, b"AB")


def test_no_output_lingers_after_a_call(rt, register):
    from wbcore_wasmtime import command

    register("flood", FLOOD)
    register("echo", ECHO)
    with pytest.raises(LimitExceeded):
        rt.call("flood")
    assert rt.call("echo", [], b"x" * 5000).stdout == b"x" * 5000
    out, err = command._io_paths(0)
    assert os.path.getsize(out) == 0 and os.path.getsize(err) == 0
    assert oct(os.stat(os.path.dirname(out)).st_mode & 0o777) == "0o700"


def test_concurrent_calls_from_threads_keep_their_own_output(rt, register):
    from concurrent.futures import ThreadPoolExecutor

    register("echo", ECHO)

    def work(i: int) -> bool:
        data = f"thread-{i}-".encode() * (i % 7 + 1) * 100
        return all(rt.call("echo", [], data).stdout == data for _ in range(25))

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, range(8)))
