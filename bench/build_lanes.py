#!/usr/bin/env python3
"""Build times of the native-compiler lanes (c, zig) and the build sandbox's own overhead.

Each lane builds its shipped toolkit through ``wbcore.builder.build`` (the path of
``wbx toolkit build``), each measurement in a fresh Python process:

- **toolchain**: zig's one-time warm-up (wasi-libc, compiler_rt) into an empty cache;
  only with ``--cold-toolchain`` (≈1–2 minutes on two cores).
- **cold**: a brand-new ``$WB_HOME`` with the zig cache already warm: a toolkit's first build.
- **warm**: the same home, the source changed (a comment appended to a copy): the lane runs.
- **hit**: unchanged source: the build cache answers; no lane runs.
- **same sha**: a second clean build (another fresh home) gave the same artifact sha256.

The sandbox overhead is ``Sandbox.run(["/bin/true"])`` against ``subprocess.run`` of the
same program, with and without the seccomp filter.

    .venv/bin/python bench/build_lanes.py [--lanes c,zig] [--n 20] [--cold-toolchain] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: lane → (toolkit, the file whose copy gets a trailing comment for the warm build)
CASES = {
    "c": ("sha256", "src/sha256.c", "/* bench */\n"),
    "zig": ("lines", "src/main.zig", "// bench\n"),
}


def child(home: str, root: str, ident: str, twice: bool) -> None:
    """One measurement in its own process: prints {"seconds", "sha256", "hit_seconds"}."""
    from wbcore import builder
    from wbcore.runtime import Runtime

    rt = Runtime.open(home=home, roots=[root])
    t0 = time.perf_counter()
    res = builder.build(rt, ident)
    out = {"seconds": time.perf_counter() - t0, "sha256": res.sha256, "cached": res.cached}
    if twice:
        t1 = time.perf_counter()
        again = builder.build(rt, ident)
        out["hit_seconds"] = time.perf_counter() - t1
        out["hit_cached"] = again.cached
    print(json.dumps(out))


def measure(home: Path, root: Path, ident: str, env: dict[str, str], twice: bool = False) -> dict:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import build_lanes as b; "
            "b.child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == '1')")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(home), str(root), ident,
                           "1" if twice else "0"], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"build of {ident} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def lane_row(lane: str, work: Path, env: dict[str, str]) -> dict:
    ident, rel, comment = CASES[lane]
    root = work / f"root-{lane}"
    shutil.copytree(ROOT / "toolkits" / ident, root / ident)
    home = work / f"home-{lane}"
    cold = measure(home, root, ident, env, twice=True)
    with open(root / ident / rel, "a") as fh:
        fh.write(comment)
    warm = measure(home, root, ident, env)
    root2 = work / f"root2-{lane}"
    shutil.copytree(ROOT / "toolkits" / ident, root2 / ident)
    again = measure(work / f"home2-{lane}", root2, ident, env)
    return {"lane": lane, "toolkit": ident, "cold_s": cold["seconds"], "warm_s": warm["seconds"],
            "hit_s": cold["hit_seconds"], "hit_cached": cold["hit_cached"], "sha256": cold["sha256"],
            "same_sha": again["sha256"] == cold["sha256"]}


def sandbox_overhead(n: int) -> dict:
    from wb_process.sandbox import Sandbox, probe, system_binds

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", default="c,zig")
    ap.add_argument("--n", type=int, default=20, help="sandbox runs per variant")
    ap.add_argument("--cold-toolchain", action="store_true", help="also time zig's cache warm-up from nothing")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from wbcore.errors import WbError
    from wbcore.runtime import Runtime

    from wb_lane_zig import cache
    from wb_lane_zig.toolchain import find

    zig = find()
    if isinstance(zig, str):
        print(f"zig lanes unavailable: {zig}", file=sys.stderr)
        return 1
    try:  # the build sandbox the lanes get: the runtime's, as in a real build
        box = Runtime.open(home=tempfile.mkdtemp(prefix="wb-bench-home-"), roots=[]).build_sandbox()
    except WbError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="wb-bench-lanes-"))
    result: dict = {"load": os.getloadavg()[0]}
    try:
        zc = Path(os.environ.get("WB_ZIG_CACHE") or Path(tempfile.gettempdir()) / "wb-bench-zig-cache")
        if args.cold_toolchain:
            fresh = work / "fresh-zig-cache"
            t0 = time.perf_counter()
            cache.warm(zig, fresh, box)
            result["toolchain_warmup_s"] = time.perf_counter() - t0
            zc = fresh
        else:
            t0 = time.perf_counter()
            spent = cache.warm(zig, zc, box)
            result["toolchain_warmup_s"] = spent if spent else None
        env = dict(os.environ, WB_ZIG_CACHE=str(zc))
        result["sandbox"] = sandbox_overhead(args.n)
        result["lanes"] = [lane_row(lane, work, env) for lane in args.lanes.split(",") if lane in CASES]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    sb = result["sandbox"]
    print(f"load average at start: {result['load']:.1f}")
    if result["toolchain_warmup_s"]:
        print(f"zig toolchain warm-up (wasi-libc, compiler_rt): {result['toolchain_warmup_s']:.1f} s")
    if "unavailable" in sb:
        print(f"sandbox unavailable: {sb['unavailable']}")
    else:
        print("\n| /bin/true | median | p90 |\n| --- | --- | --- |")
        print(f"| subprocess.run | {sb['plain_ms']:.1f} ms | |")
        print(f"| Sandbox().run (namespaces + seccomp) | {sb['sandbox_ms']:.1f} ms | {sb['sandbox_p90_ms']:.1f} ms |")
        print(f"| Sandbox(seccomp=False).run | {sb['sandbox_no_seccomp_ms']:.1f} ms | {sb['sandbox_no_seccomp_p90_ms']:.1f} ms |")
    print("\n| lane | toolkit | cold | warm (source edited) | hit | same sha256 on a clean rebuild |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in result["lanes"]:
        print(f"| {r['lane']} | {r['toolkit']} | {r['cold_s']:.2f} s | {r['warm_s']:.2f} s | {r['hit_s'] * 1000:.0f} ms"
              f"{'' if r['hit_cached'] else ' (not cached!)'} | {'yes' if r['same_sha'] else 'NO'} ({r['sha256'][:12]}…) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
