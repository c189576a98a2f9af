"""A js-lane command call beside a C command, CPU per call (issue 11 item 13).

    .venv/bin/python bench/js_call.py [--rounds 5] [--calls 60]

``Runtime.call("csv", ["to-json"])`` (the shipped js toolkit, QuickJS-NG reactor) on a
3-row CSV against ``Runtime.call("sha256")`` (the shipped C toolkit) on the same bytes,
interleaved round by round so a busy machine hurts both alike. CPU time
(``time.process_time``) and wall time per call: median, min and max over rounds, N calls
per round, the machine's load average before and after. The first call of each builds
(or finds cached) the toolkit; it is not timed. Target: js ≤ 1.5 ms CPU per call.
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

CSV = b"name,year,alive\nAda Lovelace,1815,false\nAlan Turing,1912,false\nGrace Hopper,1906,false\n"


def measure(fn, n: int) -> tuple[float, float]:
    """(wall, cpu) seconds per call over ``n`` calls."""
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - w0) / n, (time.process_time() - c0) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--home", default=None, help="reuse a home (its build cache) across runs")
    args = ap.parse_args()
    os.environ.setdefault("WB_ZIG_CACHE", str(Path.home() / ".cache" / "wbcore" / "zig"))
    rt = fresh_runtime(args.home or tempfile.mkdtemp(prefix="wb-bench-js-"))
    from wbcore_runtime.build import builder

    for ident in ("csv", "sha256"):  # built once (cached in --home), not timed
        builder.build(rt, ident)
    js = rt.call("csv", ["to-json"], CSV)
    assert js.exit_code == 0 and js.stdout.startswith(b'[{"name":"Ada Lovelace"'), js
    c = rt.call("sha256", [], CSV)
    assert c.exit_code == 0 and c.stdout, c
    variants = {
        "js: csv to-json (QuickJS-NG)": lambda: rt.call("csv", ["to-json"], CSV),
        "C: sha256": lambda: rt.call("sha256", [], CSV),
    }
    for fn in variants.values():
        measure(fn, 10)
    load0 = os.getloadavg()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            samples[name].append(measure(fn, args.calls))
    load1 = os.getloadavg()
    print(f"js-lane call beside a C command: {os.cpu_count()} cpus, load {load0[0]:.2f} → {load1[0]:.2f} "
          f"(1-min avg), {args.rounds} interleaved rounds of N={args.calls} calls, {len(CSV)} B stdin")
    print(f"{'variant':32} {'CPU ms med (min–max)':>24} {'wall ms med (min–max)':>24}")
    for name, xs in samples.items():
        cpu = [x[1] * 1e3 for x in xs]
        wall = [x[0] * 1e3 for x in xs]
        print(f"{name:32} {statistics.median(cpu):>8.2f} ({min(cpu):.2f}–{max(cpu):.2f})    "
              f"{statistics.median(wall):>8.2f} ({min(wall):.2f}–{max(wall):.2f})")
    js_cpu = statistics.median(x[1] for x in samples["js: csv to-json (QuickJS-NG)"])
    print(f"target js ≤ 1.5 ms CPU per call: {'met' if js_cpu <= 1.5e-3 else 'MISSED'} ({js_cpu * 1e3:.2f} "
          "ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
