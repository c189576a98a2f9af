#!/usr/bin/env python3
"""Cold and cached build times of every build lane, wall and CPU, over N rounds.

Each lane builds its shipped toolkit through ``wbcore_runtime.build.builder.build`` (the path of
``wbx toolkit build``); every measurement runs in a fresh Python process, so no in-process
cache (a compiled compiler module, an imported plugin) carries from one to the next:

- **cold**: a brand-new ``$WB_HOME`` with the machine's toolchain caches warm (the zig cache,
  the go build cache, the fetched ts/svelte compilers: what ``dev.py setup`` leaves): a
  toolkit's first build after setup.
- **cached**: a second build of the same source in the same home: the build cache answers
  and no lane runs (in-process time of ``builder.build``; ``wbx`` adds its start-up).

Wall is the build's elapsed time; CPU is user + system of the measuring process and every
process it waited for (the sandboxed compilers), over the same span, so CPU above wall means
the build used both cores. Each figure is the median (min–max) over ``--rounds`` rounds,
each round a fresh home. The one-time machine warm-ups run first and are timed apart
("already warm" when setup did them). The load average is printed before and after: the
figures are for the docs only from an idle machine.

    .venv/bin/python bench/build_lanes.py [--lanes c,c-wasm,zig,go,js,ts,svelte,python,rust]
        [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: lane → the shipped toolkit it builds.
CASES = {
    "c": "sha256",
    "c-wasm": "hexdump",
    "zig": "lines",
    "go": "table",
    "js": "csv",
    "ts": "mdtext",
    "svelte": "report-html",
    "python": "text-tools",
    "rust": "freq",
}
#: The machine-level warm-ups ``dev.py setup`` / CI run, by the lanes that use them.
WARMUPS = {("c", "zig"): ["-m", "wbcore_lane_zig", "warm"], ("go",): ["-m", "wbcore_lane_go", "warm"]}


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child(home: str, root: str, ident: str) -> None:
    """One build in its own process: prints {"wall", "cpu", "sha256", "cached"}."""
    from wbcore_runtime.build import builder
    from wbcore_runtime.runtime import Runtime

    rt = Runtime.open(home=home, roots=[root])
    c0, t0 = _cpu(), time.perf_counter()
    res = builder.build(rt, ident)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    print(json.dumps({"wall": wall, "cpu": cpu, "sha256": res.sha256, "cached": res.cached}))


def measure(home: Path, root: Path, ident: str) -> dict:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import build_lanes as b; "
            "b.child(sys.argv[2], sys.argv[3], sys.argv[4])")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(home), str(root),
                           ident],
                          capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"build of {ident} failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def lane_row(lane: str, rounds: int, work: Path) -> dict:
    ident = CASES[lane]
    root = work / f"toolkits-{lane}"
    shutil.copytree(ROOT / "toolkits" / ident, root / ident)
    cold, cached, shas = [], [], set()
    for i in range(rounds):
        home = work / f"home-{lane}-{i}"
        first = measure(home, root, ident)
        again = measure(home, root, ident)
        if first["cached"] or not again["cached"]:
            raise RuntimeError(f"{lane}: expected a lane build then a cache hit, got "
                               f"cached={first['cached']}, {again['cached']}")
        cold.append(first)
        cached.append(again)
        shas.add(first["sha256"])
        shutil.rmtree(home, ignore_errors=True)
    return {
        "lane": lane, "toolkit": ident, "rounds": rounds, "same_sha256": len(shas) == 1,
        "sha256": sorted(shas)[0],
        "cold_wall_s": spread([m["wall"] for m in cold]), "cold_cpu_s": spread([m["cpu"] for m in cold]),
        "cached_wall_s": spread([m["wall"] for m in cached]),
        "cached_cpu_s": spread([m["cpu"] for m in cached]),
    }


def sandbox_overhead(n: int) -> dict:
    from wbcore_process.sandbox import Sandbox, probe, system_binds

    ok, reason, _ = probe()
    if not ok:
        return {"unavailable": reason}
    out: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-sbx-"))
    try:
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(["/bin/true"], check=True)
            t.append(time.perf_counter() - t0)
        out["plain_ms"] = statistics.median(t) * 1000
        for label, box in (("sandbox_ms", Sandbox()), ("sandbox_no_seccomp_ms", Sandbox(seccomp=False))):
            binds = system_binds()
            box.run(["/bin/true"], binds=binds, out_dir=tmp / "o")
            t = []
            for _ in range(n):
                t0 = time.perf_counter()
                res = box.run(["/bin/true"], binds=binds, out_dir=tmp / "o")
                t.append(time.perf_counter() - t0)
                assert res.ok, res.log
            out[label] = statistics.median(t) * 1000
            out[label.replace("_ms", "_p90_ms")] = sorted(t)[int(len(t) * 0.9) - 1] * 1000
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def warm_machine(lanes: list[str]) -> dict[str, str]:
    """Run the machine-level warm-ups the chosen lanes use; what each said, with its time."""
    out = {}
    for users, argv in WARMUPS.items():
        if not set(users) & set(lanes):
            continue
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=1800)
        said = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines()
                or [f"exit {proc.returncode}"])[-1]
        out[" ".join(argv[1:])] = f"{said} ({time.perf_counter() - t0:.1f} s wall)"
    return out


def fmt(s: dict, unit: float = 1.0, suffix: str = " s", digits: int = 2) -> str:
    return (f"{s['median'] * unit:.{digits}f}{suffix} "
            f"({s['min'] * unit:.{digits}f}–{s['max'] * unit:.{digits}f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--rounds", type=int, default=3,
                    help="fresh homes per lane (each: one cold and one cached build)")
    ap.add_argument("--sandbox-runs", type=int, default=0, metavar="N",
                    help="also time the build sandbox itself: Sandbox.run(/bin/true) N times against "
                         "subprocess.run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # The machine-wide zig cache dev.py and CI use (unset, each fresh home would warm its own:
    # a "cold" zig build would then time zig compiling wasi-libc, not the build).
    os.environ.setdefault("WB_ZIG_CACHE", str(Path.home() / ".cache" / "wbcore" / "zig"))
    lanes = [x for x in args.lanes.split(",") if x]
    unknown = [x for x in lanes if x not in CASES]
    if unknown or not 1 <= args.rounds <= 50:
        ap.error(f"unknown lane(s) {', '.join(unknown)} (known: {', '.join(CASES)})" if unknown
                 else "--rounds: 1 to 50")
    from wbcore_runtime.runtime import Runtime

    result: dict = {"load_before": os.getloadavg(), "cpus": os.cpu_count(), "warmups": warm_machine(lanes),
                    "lanes": []}
    probe_home = tempfile.mkdtemp(prefix="wb-bench-probe-")
    work = Path(tempfile.mkdtemp(prefix="wb-bench-lanes-"))
    try:
        rt = Runtime.open(home=probe_home, roots=[])
        for lane in lanes:
            if lane not in rt.lanes:
                result["lanes"].append({"lane": lane, "toolkit": CASES[lane],
                                        "skipped": "lane not installed"})
                continue
            avail = rt.lanes.get(lane).availability(rt)
            if not avail.ok:
                result["lanes"].append({"lane": lane, "toolkit": CASES[lane], "skipped": avail.reason})
                continue
            try:
                result["lanes"].append(lane_row(lane, args.rounds, work))
            except RuntimeError as exc:
                result["lanes"].append({"lane": lane, "toolkit": CASES[lane],
                                        "skipped": str(exc).splitlines()[0]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(probe_home, ignore_errors=True)
    if args.sandbox_runs > 0:
        result["sandbox"] = sandbox_overhead(args.sandbox_runs)
    result["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    la, lb = result["load_before"], result["load_after"]
    print(f"{result['cpus']} CPUs; load average before {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}, after "
          f"{lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}")
    for what, said in result["warmups"].items():
        print(f"machine warm-up `python -m {what}`: {said}")
    print(f"\nmedian (min–max) of {args.rounds} round(s); cold: a fresh home, machine caches warm; cached: "
          "the same home again\n")
    print("| lane | toolkit | cold wall | cold CPU | cached wall | cached CPU | same sha256 every round |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in result["lanes"]:
        if "skipped" in r:
            print(f"| {r['lane']} | {r['toolkit']} | skipped: {r['skipped']} | | | | |")
            continue
        print(f"| {r['lane']} | {r['toolkit']} | {fmt(r['cold_wall_s'])} | {fmt(r['cold_cpu_s'])} | "
              f"{fmt(r['cached_wall_s'], 1000, ' ms', 0)} | {fmt(r['cached_cpu_s'], 1000, ' ms', 0)} | "
              f"{'yes' if r['same_sha256'] else 'NO'} ({r['sha256'][:12]}…) |")
    sb = result.get("sandbox")
    if sb and "unavailable" in sb:
        print(f"\nsandbox unavailable: {sb['unavailable']}")
    elif sb:
        print("\n| /bin/true | median | p90 |\n| --- | --- | --- |")
        print(f"| subprocess.run | {sb['plain_ms']:.1f} ms | |")
        print(f"| Sandbox().run (namespaces + seccomp) | {sb['sandbox_ms']:.1f} ms | "
              f"{sb['sandbox_p90_ms']:.1f} ms |")
        print(f"| Sandbox(seccomp=False).run | {sb['sandbox_no_seccomp_ms']:.1f} ms | "
              f"{sb['sandbox_no_seccomp_p90_ms']:.1f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
