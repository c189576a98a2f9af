#!/usr/bin/env python3
"""Cold and warm build times of the c-wasm, js, ts, go and rust lanes.

Each lane builds its shipped toolkit through ``wbcore.builder.build`` (the path of
``wbx toolkit build``), every measurement in a fresh Python process so in-process
caches (compiled compiler modules) do not leak between them:

- **cold**: a brand-new ``$WB_HOME``: nothing staged, no compiled compiler cached, no Go
  build cache, no TypeScript bytecode. What a first build on a new machine costs.
- **warm**: the same home, the toolkit source changed (a comment appended to a copy), so
  the lane runs again with every lane cache warm. What editing a toolkit costs.
- **hit**: the same home and unchanged source: the build cache answers; no lane runs.
  (In-process time of ``builder.build``; add ~0.3 s of ``wbx`` start-up for the CLI.)
- **same sha**: whether a second clean build (another fresh home) gave the same
  artifact sha256.

    .venv/bin/python bench/build_lanes_wasm.py [--lanes c-wasm,js] [--json]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: lane → (toolkit, the file whose copy gets a trailing comment for the warm build)
CASES = {
    "c-wasm": ("hexdump", "src/hexdump.c", "/* bench */\n"),
    "js": ("csv", "src/main.js", "// bench\n"),
    "ts": ("mdtext", "src/main.ts", "// bench\n"),
    "svelte": ("report-html", "src/App.svelte", "<!-- bench -->\n"),
    "go": ("table", "src/main.go", "// bench\n"),
    "rust": ("freq", "src/src/main.rs", "// bench\n"),
}


def child(home: str, root: str, ident: str, twice: bool) -> None:
    """One measurement, in its own process: prints {"seconds", "sha256", "hit_seconds"}."""
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


def measure(home: Path, root: Path, ident: str, twice: bool = False) -> dict:
    code = "import sys; sys.path.insert(0, sys.argv[1]); import build_lanes_wasm as b; b.child(*sys.argv[2:5], sys.argv[5] == '1')"
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(home), str(root), ident, "1" if twice else "0"],
                          capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"build of {ident} failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    from wbcore.runtime import Runtime

    want = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--lanes=")), list(CASES))
    rt = Runtime.open(home=tempfile.mkdtemp(prefix="wb-bench-probe-"))
    rows = []
    for lane in want:
        ident, rel, comment = CASES[lane]
        if lane not in rt.lanes:
            rows.append({"lane": lane, "toolkit": ident, "skipped": "lane not installed"})
            continue
        avail = rt.lanes.get(lane).availability(rt)
        if not avail.ok:
            rows.append({"lane": lane, "toolkit": ident, "skipped": avail.reason})
            continue
        with tempfile.TemporaryDirectory(prefix="wb-bench-lanes-") as tmp:
            tmpd = Path(tmp)
            root = tmpd / "toolkits"
            shutil.copytree(ROOT / "toolkits" / ident, root / ident)
            home, home2 = tmpd / "home", tmpd / "home2"
            cold = measure(home, root, ident)
            with (root / ident / rel).open("a") as fh:
                fh.write(comment)
            warm = measure(home, root, ident, twice=True)
            # a second clean build of the original source, for the reproducibility check
            (root / ident / rel).write_text((ROOT / "toolkits" / ident / rel).read_text())
            again = measure(home2, root, ident)
            rows.append({
                "lane": lane, "toolkit": ident, "cold_s": round(cold["seconds"], 2), "warm_s": round(warm["seconds"], 2),
                "hit_s": round(warm["hit_seconds"], 3), "hit_cached": warm["hit_cached"],
                "same_sha": again["sha256"] == cold["sha256"], "sha256": cold["sha256"],
            })
    if "--json" in argv:
        print(json.dumps(rows, indent=2))
        return 0
    print("| lane | toolkit | cold build | warm build (source changed) | rebuild unchanged (cache hit) | same sha256 on a clean rebuild |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['lane']} | {r['toolkit']} | skipped: {r['skipped']} | | | |")
        else:
            print(f"| {r['lane']} | {r['toolkit']} | {r['cold_s']:.2f} s | {r['warm_s']:.2f} s | {r['hit_s'] * 1000:.0f} ms"
                  f"{'' if r['hit_cached'] else ' (not cached!)'} | {'yes' if r['same_sha'] else 'NO'} ({r['sha256'][:12]}…) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
