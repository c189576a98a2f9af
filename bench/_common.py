"""Shared helpers for the run-engine benchmarks (not a benchmark itself)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def fresh_runtime(home: str | None = None, **kw: Any) -> Any:
    from wbcore_runtime.runtime import Runtime

    return Runtime.open(home=home or tempfile.mkdtemp(prefix="wb-bench-"), roots=[ROOT / "toolkits"], **kw)


def timed(fn: Callable[[], Any], n: int, warm: int = 50) -> list[float]:
    """Per-call wall times in seconds (each call timed alone)."""
    for _ in range(warm):
        fn()
    clock = time.perf_counter
    out = []
    for _ in range(n):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def loop_rate(fn: Callable[[], Any], seconds: float = 1.0, batch: int = 1000) -> float:
    """Calls per second over a tight loop (after a warm-up)."""
    for _ in range(min(batch, 100)):
        fn()
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(batch):
            fn()
        n += batch
        el = time.perf_counter() - t0
        if el >= seconds:
            return n / el


def us(x: float) -> str:
    return f"{x * 1e6:,.1f} µs"


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"median": statistics.median(s), "p10": s[len(s) // 10], "p90": s[(len(s) * 9) // 10],
            "mean": statistics.fmean(s)}


def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line.format(*r))


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cpus, load {load:.2f}"


def system_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat (0, 0 elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)
