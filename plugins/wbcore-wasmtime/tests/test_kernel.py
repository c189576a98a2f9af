"""The kernel shape: instantiate once, bounded arena, deadlines, recovery after a fault."""

from __future__ import annotations

import time

import pytest
from conftest import K_LIAR, K_LOOP, K_TRAP_ONCE, K_UPPER

from wbcore_runtime.contract.calls import GuestTrap, KernelABIError
from wbcore_runtime.contract.errors import InvalidArgs, Timeout


def test_kernel_round_trip_reuses_one_instance(rt, register):
    register("kup", K_UPPER, kind="kernel")
    with rt.kernel("kup") as k:
        assert k.call(b"hello") == b"HELLO"
        assert k.call(b"") == b""
        assert k.call(b"x" * 60000) == b"X" * 60000
        assert k.calls == 3
    assert rt.kernel_call("kup", b"abc") == b"ABC"


def test_input_over_the_arena_is_refused(rt, register):
    register("kup", K_UPPER, kind="kernel")
    with rt.kernel("kup") as k:
        with pytest.raises(InvalidArgs, match="input arena"):
            k.call(b"x" * (65536 - 1024 + 1))
        assert k.call(b"ok") == b"OK"


def test_out_len_past_memory_is_an_error_not_a_host_read(rt, register):
    register("liar", K_LIAR, kind="kernel")
    with rt.kernel("liar") as k, pytest.raises(KernelABIError, match="past the end of its"):
        k.call(b"x")


def test_custom_offsets_and_entry(rt, register):
    wat = """(module (memory (export "memory") 1)
      (func (export "run") (param $n i32) (result i32)
        (memory.copy (i32.const 40000) (i32.const 100) (local.get $n)) (local.get $n)))"""
    register("kcopy", wat, kind="kernel", entry="run", in_off=100, out_off=40000)
    assert rt.kernel_call("kcopy", b"same bytes") == b"same bytes"
    register("kbad", wat, kind="kernel", entry="nope")
    with pytest.raises(KernelABIError, match="'nope'"):
        rt.kernel("kbad")
    register("koff", wat, kind="kernel", entry="run", in_off=10, out_off=1 << 20)
    with pytest.raises(KernelABIError, match="outside"):
        rt.kernel("koff")


def test_kernel_deadline_and_recovery(rt, register):
    register("kspin", K_LOOP, kind="kernel", timeout_s=0.2)
    with rt.kernel("kspin") as k:
        t0 = time.perf_counter()
        with pytest.raises(Timeout):
            k.call(b"x")
        assert time.perf_counter() - t0 < 0.22 + 0.05


def test_trap_poisons_then_reinstantiates(rt, register):
    register("ktrap", K_TRAP_ONCE, kind="kernel")
    with rt.kernel("ktrap") as k:
        assert k.call(b"a") == (1).to_bytes(4, "little")
        assert k.call(b"b") == (2).to_bytes(4, "little")
        with pytest.raises(GuestTrap, match="unreachable"):
            k.call(b"x" * 13)
        # a fresh instance: its call counter starts again
        assert k.call(b"c") == (1).to_bytes(4, "little")


def test_a_spinning_kernel_does_not_hold_the_gil(rt, register):
    import threading

    register("kspin", K_LOOP, kind="kernel", timeout_s=0.3)
    k = rt.kernel("kspin")
    started = threading.Event()
    outcome: list[str] = []

    def spin() -> None:
        started.set()
        try:
            k.call(b"x")
        except Timeout:
            outcome.append("timeout")

    t = threading.Thread(target=spin)
    t.start()
    started.wait()
    n, t0 = 0, time.perf_counter()
    while t.is_alive() and time.perf_counter() - t0 < 0.2:
        n += 1  # pure Python: runs only while the other thread has released the GIL
    t.join()
    k.close()
    assert outcome == ["timeout"]
    # had the call held the GIL, this thread could not have run a single iteration while
    # the guest spun (the loop stops when the spinning thread ends)
    assert n > 1000, n


def test_kernel_call_follows_a_reregistration(rt, register):
    register("k", K_UPPER, kind="kernel")
    assert rt.kernel_call("k", b"abc") == b"ABC"
    register("k", K_TRAP_ONCE, kind="kernel")
    assert rt.kernel_call("k", b"abc") == (1).to_bytes(4, "little")


K_OOB = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32)
    (i32.store (i32.const 0x7ffffff0) (i32.const 1)) (i32.const 0)))"""


def test_a_write_past_guest_memory_traps_cleanly(rt, register):
    register("koob", K_OOB, kind="kernel")
    with rt.kernel("koob") as k, pytest.raises(GuestTrap, match="out of bounds"):
        k.call(b"x")


def test_100_bad_kernel_calls_leave_rss_flat(rt, register):
    import os

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    register("koob", K_OOB, kind="kernel")
    register("liar", K_LIAR, kind="kernel")
    register("ktrap", K_TRAP_ONCE, kind="kernel")
    ks = [rt.kernel(n) for n in ("koob", "liar", "ktrap")]

    def bad(i: int) -> None:
        k = ks[i % 3]
        with pytest.raises((GuestTrap, KernelABIError)):
            k.call(b"x" * (13 if k is ks[2] else 1))

    for i in range(30):
        bad(i)
    before = rss()
    for i in range(100):
        bad(i)
    assert rss() - before < 16 << 20
    for k in ks:
        k.close()


def test_kernel_memory_bomb_is_a_memory_limit(rt, register):
    from wbcore_runtime.contract.calls import LimitExceeded

    register("kbomb", """(module (memory (export "memory") 2)
      (func (export "process") (param $n i32) (result i32)
        (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
        unreachable))""", kind="kernel")
    with rt.kernel("kbomb") as k, pytest.raises(LimitExceeded) as info:
        k.call(b"x")
    assert info.value.limit == "memory"
