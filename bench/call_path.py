"""The call path against its floors, interleaved round by round (issue 10's budget).

    .venv/bin/python bench/call_path.py [--rounds 7] [--calls 400] [--kernel-calls 20000]

Variants, each round in turn (so a busy machine hurts them alike):

- ``floor: bare wasmtime``: a fresh ``Store`` + WASI (argv, 1 KiB stdin, stdout to a
  file) + ``Linker.instantiate`` + ``_start`` of the same precompiled module, through
  wasmtime-py's public API, stdout read back;
- ``Runtime.call``: the whole call path (dispatch's cached resolution, request, the
  command runner, limits, output capture) on the same module (the built-in ``upper``);
- ``floor: kernel handle``: ``inst.call(64 B)`` on an open kernel instance;
- ``Runtime.kernel_call``: the same kernel by name (resolution + per-thread instance).

Wall and CPU time (``time.process_time``) per call: median, min and max over rounds,
with N calls per round and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_runtime

STDIN = (b"The quick brown fox jumps over the lazy dog. " * 24)[:1024]
KDATA = bytes(range(64))
#: A kernel that copies its input to its output (seed 004 ABI: in at 1024, out at 65536).
COPY_KERNEL = """(module
  (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32)
    (memory.copy (i32.const 65536) (i32.const 1024) (local.get $n))
    (local.get $n)))"""


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def measure(fn, n: int) -> tuple[float, float]:
    """(wall, cpu) seconds per call over ``n`` calls."""
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - w0) / n, (time.process_time() - c0) / n


def bare_floor(rt):
    """One call through wasmtime-py's public API, nothing of wbcore on the path."""
    import wasmtime

    entry = rt.registry.get("command", "upper")
    engine = wasmtime.Engine()
    module = wasmtime.Module(engine, rt.artifacts.path(entry.sha256).read_bytes())
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    # the same private tmpfs the command runner writes guest output to, when there is one
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    tmp = tempfile.mkdtemp(prefix="wb-bench-floor-", dir=shm)
    stdin_path, out_path = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    Path(stdin_path).write_bytes(STDIN)

    def call() -> bytes:
        store = wasmtime.Store(engine)
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["upper"]
        wasi.stdin_file = stdin_path
        wasi.stdout_file = out_path
        store.set_wasi(wasi)
        inst = linker.instantiate(store, module)
        try:
            inst.exports(store)["_start"](store)
        except wasmtime.ExitTrap:
            pass
        del store, inst
        with open(out_path, "rb") as fh:
            return fh.read()

    return call


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--kernel-calls", type=int, default=20000)
    args = ap.parse_args()
    import wasmtime

    from wbcore_runtime.store.registry import Entry

    rt = fresh_runtime(tempfile.mkdtemp(prefix="wb-bench-path-"))
    assert rt.call("upper", [], STDIN).stdout == STDIN.upper()
    floor = bare_floor(rt)
    assert floor() == STDIN.upper()
    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(COPY_KERNEL)))
    rt.registry.register(Entry(kind="kernel", name="copy", sha256=art.sha256, shape="kernel"))
    handle = rt.kernel("copy")
    assert handle.call(KDATA) == KDATA and rt.kernel_call("copy", KDATA) == KDATA

    variants = {
        "floor: bare wasmtime (fresh store + run)": (floor, args.calls),
        "Runtime.call (upper, 1 KiB)": (lambda: rt.call("upper", (), STDIN), args.calls),
        "floor: kernel handle (64 B)": (lambda: handle.call(KDATA), args.kernel_calls),
        "Runtime.kernel_call (64 B)": (lambda: rt.kernel_call("copy", KDATA), args.kernel_calls),
    }
    for fn, n in variants.values():  # warm every path before the first timed round
        measure(fn, max(50, n // 20))
    load0 = os.getloadavg()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, (fn, n) in variants.items():
            samples[name].append(measure(fn, n))
    load1 = os.getloadavg()

    def stats(name: str, i: int) -> tuple[float, float, float]:
        xs = [s[i] for s in samples[name]]
        return statistics.median(xs), min(xs), max(xs)

    print(f"call path vs floors: {os.cpu_count()} cpus, load {load0[0]:.2f} → {load1[0]:.2f} (1-min avg), "
          f"{args.rounds} interleaved rounds, wasmtime-py {_version('wasmtime')}")
    print(f"{'variant':44} {'N/round':>8} {'wall µs med (min–max)':>24} {'CPU µs med (min–max)':>24}")
    for name, (_, n) in variants.items():
        w, c = stats(name, 0), stats(name, 1)
        print(f"{name:44} {n:>8} {w[0] * 1e6:>9.1f} ({w[1] * 1e6:.1f}–{w[2] * 1e6:.1f}) "
              f"{c[0] * 1e6:>9.1f} ({c[1] * 1e6:.1f}–{c[2] * 1e6:.1f})")
    names = list(variants)
    cmd_ratio = [s[1] / f[1] for s, f in zip(samples[names[1]], samples[names[0]], strict=True)]
    k_ratio = [s[1] / f[1] for s, f in zip(samples[names[3]], samples[names[2]], strict=True)]
    k_rate = 1 / stats(names[3], 0)[0]
    k_cpu_rate = 1 / stats(names[3], 1)[0]
    print(f"command call / bare floor (CPU, per round): median {statistics.median(cmd_ratio):.2f}x "
          f"(min {min(cmd_ratio):.2f}, max {max(cmd_ratio):.2f}); budget ≤ 1.15x")
    print(f"kernel_call / kernel handle (CPU, per round): median {statistics.median(k_ratio):.2f}x "
          f"(min {min(k_ratio):.2f}, max {max(k_ratio):.2f}); budget ≤ 1.5x")
    print(f"kernel_call rate: {k_rate:,.0f} calls/s of wall time, {k_cpu_rate:,.0f} per CPU-second (median "
          "round); budget ≥ 200,000 on an idle core (where wall ≈ CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
