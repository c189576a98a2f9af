"""The built-in jq (upstream jq 1.8.2): its build in a fresh home, its module, a call.

    WB_ZIG_CACHE=~/.cache/wbcore/zig .venv/bin/python bench/jq_builtin.py [--builds 2] [--calls 20]

Each build opens a fresh ``WB_HOME`` (no build cache) and registers the built-in, which
compiles it with the c lane in the build sandbox; then ``jq -c .a`` on a tiny document is
timed: the first call (which compiles the module to machine code) and the next ones. Needs the
sources fetched (``python -m wbcore_lane_zig fetch-jq``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    from wbcore_runtime.runtime import Runtime

    env = {"PATH": os.environ.get("PATH", ""),
           **{k: v for k, v in os.environ.items() if k in ("WB_ZIG_CACHE", "WB_JQ_CACHE")}}
    for i in range(args.builds):
        home = tempfile.mkdtemp(prefix="wb-bench-jq-")
        try:
            rt = Runtime.open(home=home, roots=[], env=env)
            t, c0 = time.perf_counter(), os.times()
            rt.install_builtins(["jq"])
            wall, c1 = time.perf_counter() - t, os.times()
            cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
            size = len(rt.artifacts.read_verified(rt.registry.lookup("command", "jq").sha256))
            t = time.perf_counter()
            rt.call("jq", ["-c .a"], b'{"a":1}')  # the first call compiles the module to machine code
            first = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(args.calls):
                res = rt.call("jq", ["-c .a"], b'{"a":1}')
                assert res.exit_code == 0 and res.stdout == b"1\n", res
            per_call = (time.perf_counter() - t) / args.calls
            print(f"build {i}: {wall:.1f}s wall, {cpu:.1f}s compiler CPU, module {size} bytes; "
                  f"`jq -c .a` first call {first:.2f}s, then {per_call * 1000:.1f} ms/call (load "
                  f"{os.getloadavg()[0]:.1f})")
        finally:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
