"""fabric.map on the local (process) and threads engines: order, per-input errors,
backpressure, deadline, cancellation, kernels reused per worker, the fork hazard."""

from __future__ import annotations

import threading
import time

import pytest
from fabric_guests import ECHO, K_COUNT, K_UPPER, SPIN

from wbcore_runtime.dispatch import fabric
from wbcore_runtime.contract.errors import ErrorKind, InvalidArgs, NotFound, Timeout


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_commands_in_input_order_with_per_input_errors(rt, register, engine):
    register("echo", ECHO)
    inputs = [{"argv": [], "stdin": f"item-{i}" if i % 7 else f"!boom-{i}"} for i in range(40)]
    inputs[5] = {"argv": "not a list"}
    out = list(rt.fabric("echo", inputs, width=2, engine=engine))
    assert [r.index for r in out] == list(range(40))
    for i, r in enumerate(out):
        if i == 5:
            assert r.error is not None and r.error.kind is ErrorKind.INVALID_ARGS
        elif i % 7 == 0:
            # the guest trapped: this input only
            assert r.error is not None and "unreachable" in r.error.message
        else:
            assert r.ok and r.value.exit_code == 0 and r.value.stdout == f"item-{i}".encode()


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_kernel_map_same_outputs_on_both_engines(rt, register, engine):
    register("kup", K_UPPER, kind="kernel")
    words = [f"word {i} abc" for i in range(3000)]
    got = [r.value for r in fabric.map(rt, "kup", words, kind="kernel", width=2, engine=engine)]
    assert got == [w.upper().encode() for w in words]


def test_a_kernel_is_instantiated_once_per_worker(rt, register):
    register("kcount", K_COUNT, kind="kernel")
    n = 2000
    counts = [int.from_bytes(r.value, "little")
              for r in fabric.map(rt, "kcount", [b"x"] * n, kind="kernel", width=2)]
    # each instance counts its own calls from 1: one "1" per instance, at most one per worker
    assert 1 <= counts.count(1) <= 2
    assert max(counts) >= n // 2 and len(counts) == n


@pytest.mark.parametrize("api", ["map", "map_chunks"])
def test_inputs_are_consumed_lazily_within_the_window(rt, register, api):
    register("kup", K_UPPER, kind="kernel")
    taken = 0

    def endless():
        nonlocal taken
        while True:
            taken += 1
            yield b"abc"

    from wbcore_fabric_local.processes import K

    if api == "map":
        results = fabric.map(rt, "kup", endless(), kind="kernel", width=2, batch=8)
        first = [next(results) for _ in range(100)]
        assert all(r.value == b"ABC" for r in first)
        assert taken <= 100 + 2 * K * 8 + 1  # at most width × K × batch beyond what was yielded
    else:
        results = fabric.map_chunks(rt, "kup", endless(), kind="kernel", width=2, batch=8)
        seen = 0
        while seen < 200:
            c = next(results)
            assert list(c.values) == [b"ABC"] * len(c)
            seen += len(c)
            assert taken <= seen + 2 * K * 8 + 1  # the same window, per chunk yielded
    results.close()
    stopped = taken
    time.sleep(0.3)
    assert taken == stopped  # closed: nothing reads the inputs any more


def test_the_batch_deadline_ends_spinning_calls(rt, register):
    register("spin", SPIN)
    t0 = time.monotonic()
    with pytest.raises(Timeout):
        list(fabric.map(rt, "spin", [{}] * 4, width=2, deadline=2.0))
    assert time.monotonic() - t0 < 15  # worker start-up (spawn) plus the 2 s deadline


def test_cancel_stops_the_batch(rt, register):
    register("kup", K_UPPER, kind="kernel")
    cancel = threading.Event()
    got = []
    for r in fabric.map(rt, "kup", (b"a" for _ in range(10**9)), kind="kernel", width=2, cancel=cancel):
        got.append(r)
        if len(got) == 50:
            cancel.set()
    assert 50 <= len(got) < 10**6


def test_compile_in_the_parent_then_map_completes(rt, register):
    """A fork after wasmtime compiled a module can deadlock the child: workers are spawned."""
    register("echo", ECHO)
    assert rt.call("echo", stdin=b"warm").stdout == b"warm"  # the parent has compiled and run it
    out = list(fabric.map(rt, "echo", [{"stdin": str(i)} for i in range(20)], width=2, deadline=120))
    assert [r.value.stdout for r in out] == [str(i).encode() for i in range(20)]


def test_fork_is_refused_as_a_start_method(rt, register, monkeypatch):
    register("echo", ECHO)
    monkeypatch.setenv("WB_FABRIC_START", "fork")
    with pytest.raises(InvalidArgs, match="never fork"):
        fabric.map(rt, "echo", [{}])


def test_unknown_names_list_the_known(rt, register):
    register("echo", ECHO)
    with pytest.raises(NotFound, match="fabric engine 'spark'.*local"):
        fabric.map(rt, "echo", [{}], engine="spark")
    with pytest.raises(NotFound, match="nope"):
        fabric.map(rt, "nope", [{}])
    with pytest.raises(InvalidArgs, match="width"):
        fabric.map(rt, "echo", [{}], width=0)


def test_calls_granted_caps_run_on_threads_not_in_workers(rt, make_toolkit):
    """A broker's per-process limits must not be multiplied by worker processes."""
    import wasmtime

    from wbcore_runtime.build import builder
    from wbcore_runtime.contract.errors import CapabilityDenied

    make_toolkit("kvuser", exec="command", caps="kv", extra={"CLI_BIN": "kvuser"})
    rt.discover(refresh=True)
    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(ECHO)))
    builder.register_artifact(rt, "kvuser", art.sha256)
    if not rt.resolve("command", "kvuser").caps:
        pytest.skip("kv is not granted here (its broker plugin is not installed)")
    with pytest.raises(CapabilityDenied, match="--engine threads"):
        fabric.map(rt, "kvuser", [{}])
    out = list(fabric.map(rt, "kvuser", [{"stdin": "a"}, {"stdin": "b"}], engine="threads", width=2))
    assert [r.value.stdout for r in out] == [b"a", b"b"]


def test_threads_engine_deadline_and_cancel(rt, register):
    register("spin", SPIN)
    t0 = time.monotonic()
    with pytest.raises(Timeout):
        list(fabric.map(rt, "spin", [{}] * 4, width=2, engine="threads", deadline=0.5))
    assert time.monotonic() - t0 < 5
    cancel = threading.Event()
    it = fabric.map(rt, "spin", [{}] * 4, width=2, engine="threads", cancel=cancel)
    threading.Timer(0.3, cancel.set).start()
    assert list(it) == []


def test_a_dead_worker_fails_only_its_inputs(rt, register):
    import os
    import signal

    register("spin", SPIN)
    register("echo", ECHO)
    # the first input spins in one worker; kill that worker: only its input fails, the rest run
    inputs = [{"stdin": "x"}] * 6
    results = fabric.map(rt, "echo", iter(inputs), width=2, batch=1)
    first = next(results)
    assert first.ok
    import multiprocessing

    kids = multiprocessing.active_children()
    assert len(kids) == 2
    os.kill(kids[0].pid, signal.SIGKILL)
    rest = list(results)
    assert len(rest) == 5
    assert all(r.ok or "exited" in r.error.message for r in rest)
    from wbcore_fabric_local.processes import K

    assert sum(r.ok for r in rest) >= 5 - K  # the killed worker held at most K inputs (batch=1)


def test_a_stronger_tier_runs_inside_the_workers(rt, register):
    if "os_process" not in rt.tiers or not rt.tiers.get("os_process").available().ok:
        pytest.skip("the os_process tier is not installed or not available here")
    register("echo", ECHO)
    job = fabric.job(rt, "echo", tier="os_process", width=2)
    assert job.tier == "os_process"
    out = list(fabric.map(rt, "echo", [{"stdin": "a"}, {"stdin": "!trap"}], width=2, tier="os_process",
                          deadline=120))
    assert out[0].value.stdout == b"a"
    # the tier's own report of a trap (os_process: exit 70 with the trap on stderr), this input only
    assert out[1].error is not None or out[1].value.exit_code != 0


@pytest.mark.parametrize("api", ["map", "map_chunks"])
def test_streaming_keeps_the_parent_small(rt, register, api):
    """50 MiB of kernel inputs pass through; the parent holds only the window (both APIs)."""
    register("kup", K_UPPER, kind="kernel")

    def rss_mib() -> float:
        with open("/proc/self/status") as fh:
            return next(int(x.split()[1]) for x in fh if x.startswith("VmRSS:")) / 1024

    blob = b"y" * 1000
    inputs = (blob + b"%05d" % i for i in range(50_000))
    base = peak = rss_mib()
    n = 0
    if api == "map":
        for r in fabric.map(rt, "kup", inputs, kind="kernel", width=2):
            assert r.ok
            n += 1
            if n % 5000 == 0:
                peak = max(peak, rss_mib())
    else:
        for c in fabric.map_chunks(rt, "kup", inputs, kind="kernel", width=2):
            assert c.ok and c.values[-1] == blob.upper() + b"%05d" % (c.stop - 1)
            n += len(c)
            peak = max(peak, rss_mib())
    assert n == 50_000 and peak - base < 40


@pytest.mark.parametrize("engine", ["local", "threads"])
def test_a_failing_kernel_input_fails_alone_and_runs_once(rt, register, engine):
    """In a chunk, the inputs after a failed one still run, each exactly once (a counting kernel)."""
    register("kcount", K_COUNT, kind="kernel")
    register("kup", K_UPPER, kind="kernel")
    big = b"z" * 70_000  # over the 64,512-byte input arena: this input's InvalidArgs
    inputs = [b"a", big, b"b", 3, b"c", big, b"d"]
    out = list(fabric.map(rt, "kup", inputs, kind="kernel", width=1, batch=7, engine=engine))
    assert [r.value for r in out] == [b"A", None, b"B", None, b"C", None, b"D"]
    assert [r.error.kind for r in out if r.error] == [ErrorKind.INVALID_ARGS] * 3
    counts = [r.value
              for r in fabric.map(rt, "kcount", inputs, kind="kernel", width=1, batch=7, engine=engine)]
    # big inputs fail before the guest
    assert [int.from_bytes(c, "little") for c in counts if c] == [1, 2, 3, 4]


#: kernel: an input starting with "s" spins (until the kernel's timeout_s), any other returns nothing
K_SLOW_S = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32)
    (if (i32.eq (i32.load8_u offset=1024 (i32.const 0)) (i32.const 115)) (then (loop $l (br $l))))
    (i32.const 0)))"""


@pytest.mark.parametrize("api", ["map", "map_chunks"])
def test_a_slow_first_input_does_not_let_answers_pile_up(rt, register, api):
    """Results wait in input order behind a slow input; the other worker must not run ahead
    through the whole input window meanwhile (24,576 inputs of up to 64 KiB each): at most
    width × K chunks of ~1 MiB are taken and not yet yielded."""
    from wbcore_fabric_local.processes import CHUNK_BYTES, K

    register("kslow", K_SLOW_S, kind="kernel", timeout_s=2.0)
    size, total = 8192, 5000
    taken = 0

    def inputs():
        nonlocal taken
        for i in range(total):
            taken += 1
            yield (b"s" if i == 0 else b"x") * size

    call = fabric.map if api == "map" else fabric.map_chunks
    results = call(rt, "kslow", inputs(), kind="kernel", width=2)
    first = next(results)
    at_first = taken
    results.close()
    head = first if api == "map" else next(first.results())
    assert head.index == 0 and head.error is not None and head.error.kind is ErrorKind.TIMEOUT
    assert at_first <= 2 * K * (CHUNK_BYTES // size) + 2, at_first


#: kernel: every call spins until the kernel's timeout_s
K_SPIN = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (loop $l (br $l)) (i32.const 0)))"""


def test_threads_engine_cancel_and_deadline_stop_running_kernel_calls(rt, register):
    """A kernel call running on a thread is stopped when the batch ends (cancel, or the
    deadline), not left to run out its own per-call timeout while the iterator waits."""
    register("kspin", K_SPIN, kind="kernel", timeout_s=30.0)
    cancel = threading.Event()
    it = fabric.map(rt, "kspin", [b"a"] * 4, kind="kernel", width=2, engine="threads", cancel=cancel)
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    assert list(it) == []
    assert time.monotonic() - t0 < 5
    # the instance opens with the batch's 3 s left as its per-call limit; a call that starts
    # 2.5 s later is stopped at the batch deadline, not 3 s after it started
    register("kslow", K_SLOW_S, kind="kernel", timeout_s=30.0)

    def late():
        yield b"x"
        time.sleep(2.5)
        yield b"s"

    t0 = time.monotonic()
    with pytest.raises(Timeout):
        list(fabric.map(rt, "kslow", late(), kind="kernel", width=1, engine="threads", deadline=3.0))
    assert time.monotonic() - t0 < 4.5


def test_cancel_ends_a_stream_of_malformed_inputs(rt, register):
    """Inputs that fail before any worker sees them still end at ``cancel`` (nothing waits on a
    worker, so the scheduler must look at it anyway)."""
    register("kup", K_UPPER, kind="kernel")
    cancel = threading.Event()
    got = 0
    for r in fabric.map(rt, "kup", (3 for _ in range(200_000)), kind="kernel", width=2, cancel=cancel):
        assert r.error is not None and r.error.kind is ErrorKind.INVALID_ARGS
        got += 1
        if got == 50:
            cancel.set()
    assert got < 1000, got


NOP = """(module (memory (export "memory") 1) (func (export "_start")))"""


def test_a_command_chunk_holds_about_a_mebibyte_of_stdin(rt, register):
    """A command that ignores a large stdin is fast: its chunks must still be bounded by their
    input bytes (as a kernel's are), not only by time, or the window holds gigabytes."""
    from wbcore_fabric_local.processes import CHUNK_BYTES, K

    register("nop", NOP)
    size, total = 512 << 10, 300
    taken = 0

    def inputs():
        nonlocal taken
        for _ in range(total):
            taken += 1
            yield {"stdin": b"x" * size}

    ahead = 0
    for r in fabric.map(rt, "nop", inputs(), width=2, deadline=120):
        assert r.ok and r.value.exit_code == 0
        ahead = max(ahead, taken - r.index - 1)
    assert ahead <= 2 * K * (CHUNK_BYTES // size) + 2, ahead
