"""The WASI guest runner this plugin serves to lanes (``wbcore_guest_runners``): picked through
the runtime, bounded by its deadline, memory cap and output cap, stopped by its cancel event,
and its compiled modules kept once per process and on disk."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from wbcore_runtime.contract import guest
from wbcore_runtime.contract.errors import NotFound

from conftest import BOMB, ECHO, EXIT3, FLOOD, LOOP, TRAP


@pytest.fixture
def guests(rt: Any) -> guest.GuestRunner:
    return guest.runner(rt)


def _module(guests: guest.GuestRunner, wat: str, **kw: Any) -> guest.GuestModule:
    return guests.module(wasmtime.wat2wasm(wat), **kw)


def test_the_runner_is_served_through_the_runtime(rt, make_runtime):
    assert rt.guest_runners.names() == ["wasmtime"]
    assert guest.runner(rt) is guest.runner(rt, "wasmtime")
    with pytest.raises(NotFound, match="pip install wbcore-wasmtime"):
        guest.runner(make_runtime(plugins=[]))


def test_argv_stdin_output_and_exit_code(guests, tmp_path: Path):
    stdin = tmp_path / "in"
    stdin.write_bytes(b"hello guest\n")
    res = guest.run(_module(guests, ECHO), ["echo"], stdin=stdin)
    assert ((res.exit_code, res.stdout, res.timed_out, res.trap, res.truncated)
            == (0, b"hello guest\n", False, "", False))
    res = guest.run(_module(guests, EXIT3), ["exit3"])
    assert (res.exit_code, res.stderr) == (3, b"oops\n")


def test_a_runaway_guest_stops_at_its_deadline(guests):
    t0 = time.monotonic()
    res = guest.run(_module(guests, LOOP), ["loop"], limits=guest.GuestLimits(timeout_s=0.3))
    took = time.monotonic() - t0
    assert (res.exit_code, res.timed_out, res.cancelled) == (124, True, False)
    assert res.trap == "deadline of 0.3s reached"
    assert took < 5, took


def test_memory_growth_stops_at_the_cap(guests):
    res = guest.run(_module(guests, BOMB), ["bomb"],
                    limits=guest.GuestLimits(timeout_s=10, memory_bytes=4 << 20))
    assert res.exit_code == 134 and "unreachable" in res.trap, res
    assert not res.timed_out


def test_output_past_the_cap_is_dropped_and_reported(guests):
    res = guest.run(_module(guests, FLOOD), ["flood"],
                    limits=guest.GuestLimits(timeout_s=0.5, output_bytes=1000))
    assert res.truncated and len(res.stdout) == 1000
    assert res.timed_out  # the flood never ends by itself: its deadline ends it


def test_a_set_cancel_event_stops_this_guest_alone(guests):
    mod = _module(guests, LOOP)
    cancel = threading.Event()
    results: dict[str, guest.GuestResult] = {}
    other = threading.Thread(target=lambda: results.setdefault("other", guest.run(
        mod, ["other"], limits=guest.GuestLimits(timeout_s=1.0))))
    other.start()
    threading.Timer(0.2, cancel.set).start()
    t0 = time.monotonic()
    res = guest.run(mod, ["loop"], limits=guest.GuestLimits(timeout_s=30), cancel=cancel)
    took = time.monotonic() - t0
    other.join()
    assert ((res.exit_code, res.cancelled, res.timed_out, res.trap)
            == (124, True, False, "cancelled by the caller"))
    assert took < 5, took
    # the other guest on the same engine ran to its own deadline, not cut short by the cancel
    assert results["other"].timed_out and not results["other"].cancelled


def test_a_trap_is_its_cause_not_its_backtrace(guests):
    res = guest.run(_module(guests, TRAP), ["trap"])
    assert res.exit_code == 134 and res.trap.startswith("wasm trap:") and "\n" not in res.trap


def test_compiled_once_per_process_and_kept_on_disk(guests, tmp_path: Path):
    # a module this process has not compiled yet (the in-memory cache answers first)
    wasm = wasmtime.wat2wasm(f'(module (memory (export "memory") 1) (func (export "_start")) '
                             f'(func (export "t{time.time_ns()}")))')
    cache = tmp_path / "cache"
    one = guests.module(wasm, cache_dir=cache, name="probe")
    assert guests.module(wasm, cache_dir=cache, name="probe") is one
    kept = sorted(p.name for p in cache.iterdir())
    assert len(kept) == 2 and kept[0].startswith("probe-") and kept[0].endswith(".cwasm"), kept
    assert kept[1] == kept[0] + ".sha256"
    assert "memory" in one.exports and "_start" in one.exports
    assert guest.run(one, ["probe"]).exit_code == 0


def test_a_module_runs_only_on_the_runner_that_compiled_it(guests):
    from wbcore_wasmtime.guests import WasiGuests

    mod = WasiGuests().module(wasmtime.wat2wasm(LOOP))
    with pytest.raises(ValueError, match="runner that compiled it"):
        guests.run(mod, ["x"])


def test_before_the_plugins_load_the_plugin_index_names_the_runner(make_runtime):
    first = make_runtime()  # every installed plugin: loading them writes the home's plugin index
    assert "wasmtime" in first.guest_runners.names()
    second = make_runtime()
    if second.plugin_index is None:
        pytest.skip("no plugin index in this environment (an installed plugin failed to load)")
    got = guest.runner(second)
    assert second.index_until_loaded() is not None, "asking for the runner loaded every plugin"
    assert got is guest.runner(first)
