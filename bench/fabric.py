"""The fabric on one machine: how it scales with width and with the number of inputs.

    .venv/bin/python bench/fabric.py [--rounds 2] [--kernel-n 1000000] [--max-n 100000] [--only kernel]
        [--api both|map|map_chunks]

1. A CPU-bound command (~30 ms of wasm per call) over 64 inputs, local engine, width 1 vs 2
   (worker start-up included: it is part of what a user waits for). Target on 2 idle cores: >= 1.8x.
2. Kernel calls (16-byte upper-case) over --kernel-n inputs: 1 worker vs 2 (local engine), through
   ``fabric.map`` (one ``Result`` per input) and through ``fabric.map_chunks`` (the bulk API: one
   record per chunk, outputs joined), each with this process's CPU per input (``getrusage``: user +
   system, start-up included) — on 2 cores the parent shares a core with the workers, so its cost
   per input is what bounds the speed-up of short calls.
3. 100k kernel inputs of 1 KiB (100 MiB through) streamed: the parent's RSS growth (< 100 MiB).
4. Cost vs number of short command calls (1k, 10k, 100k ``upper``): threads vs processes, width 2.
5. With ``--ray`` (wbcore-ray installed): a 2-node Ray cluster on this machine (``ray.cluster_utils``,
   one CPU per node): kernel calls over --ray-n inputs at width 2 by chunk size (Ray's per-call
   cost, and the chunk size that amortizes it), against the local engine at width 2.
Rounds are interleaved (w1, w2, w1, w2 ...) so both sides see the same load; the load is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from itertools import cycle, islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_runtime, machine, table

from wbcore_testing.fixtures import K_UPPER, burn, register_wat

def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


STEADY: list[float] = []  # per _run: seconds from the first result to the last (start-up excluded)
PARENT: list[float] = []  # per _run: this process's CPU seconds (user + system), start-up included


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _run(rt, name: str, inputs, bulk: bool = False, **kw) -> tuple[float, int]:
    """One map, consumed as a user would: per result through ``map``, per chunk through
    ``map_chunks`` (``bulk``), counting the failures either way."""
    from wbcore_runtime.dispatch import fabric

    c0, t0 = _cpu(), time.perf_counter()
    if bulk:
        chunks = fabric.map_chunks(rt, name, inputs, **kw)
        c = next(chunks, None)
        first = time.perf_counter()
        n, bad = (0, 0) if c is None else (len(c), len(c.errors))
        for c in chunks:  # the consumer's own work per chunk: two lengths
            n += len(c)
            bad += len(c.errors)
    else:
        it = fabric.map(rt, name, inputs, **kw)
        r = next(it, None)
        first = time.perf_counter()
        n, bad = (0, 0) if r is None else (1, r.error is not None)
        for r in it:  # the consumer's own work per result: one attribute read
            n += 1
            if r.error is not None:
                bad += 1
    if bad:
        raise SystemExit(f"{bad} of {n} inputs of {name} failed")
    end = time.perf_counter()
    STEADY.append(end - first)
    PARENT.append(_cpu() - c0)
    return end - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kernel-n", type=int, default=1_000_000)
    ap.add_argument("--max-n", type=int, default=100_000)
    ap.add_argument("--burn", type=int, default=60_000_000, help="iterations per CPU-bound call")
    ap.add_argument("--ray", action="store_true",
                    help="also measure the ray engine on a 2-node local cluster")
    ap.add_argument("--ray-n", type=int, default=100_000)
    ap.add_argument("--only", choices=["kernel", "ray"], help="run only this part")
    ap.add_argument("--api", choices=["both", "map", "map_chunks"], default="both",
                    help="the kernel rows through fabric.map, fabric.map_chunks (bulk), or both")
    args = ap.parse_args()
    rt = fresh_runtime()
    import wasmtime

    register_wat(rt, "burn", burn(args.burn), wat2wasm=wasmtime.wat2wasm)
    register_wat(rt, "kup", K_UPPER, "kernel", wat2wasm=wasmtime.wat2wasm)
    rt.install_builtins(["upper"])
    from wbcore_fabric_local.processes import start_method

    print(f"# fabric bench · {machine()} · start method {start_method()}")

    t0 = time.perf_counter()
    rt.call("burn")
    print(f"one burn call in this process: {(time.perf_counter() - t0) * 1000:.0f} ms")

    if args.only == "ray":
        return _ray(rt, args)
    start = [_run(rt, "burn", [{}], width=2)[0] for _ in range(2)]
    print(f"start-up: 2 workers + one call: {start[0]:.2f} s the first time (the fork server starts), "
          f"{start[1]:.2f} s the second")

    rows = []
    w1, w2 = [], []
    for _ in range(args.rounds if args.only is None else 0):
        w1.append(_run(rt, "burn", [{}] * 64, width=1)[0])
        w2.append(_run(rt, "burn", [{}] * 64, width=2)[0])
    if w1:
        rows.append(["64 × burn, local", f"{min(w1):.2f} s", f"{min(w2):.2f} s", f"{min(w1) / min(w2):.2f}x",
                     "", machine()])

    data = [b"hello fab %06d" % i for i in range(1000)]  # 16 bytes each
    n = args.kernel_n

    def kin():
        return islice(cycle(data), n)  # produced at C speed: the parent's time is the fabric's

    apis = [("map", False), ("map_chunks", True)]
    if args.api != "both":
        apis = [a for a in apis if a[0] == args.api]
    got: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):  # interleaved: every side sees the same load
        for api, bulk in apis:
            for width in (1, 2):
                el, _ = _run(rt, "kup", kin(), bulk=bulk, kind="kernel", width=width)
                got.setdefault((api, width), []).append((el, STEADY[-1], PARENT[-1]))
    for api, _bulk in apis:
        one, two = got[(api, 1)], got[(api, 2)]
        t1, t2 = min(r[0] for r in one), min(r[0] for r in two)
        f1, f2 = min(r[1] for r in one), min(r[1] for r in two)
        p1, p2 = min(r[2] for r in one), min(r[2] for r in two)
        rows.append([f"{n:,} kernel calls, local, {api}", f"{n / t1:,.0f}/s", f"{n / t2:,.0f}/s",
                     f"{t1 / t2:.2f}x", f"{p1 / n * 1e6:.3f} / {p2 / n * 1e6:.3f} µs", machine()])
        rows.append(["  same, after the first result", f"{n / f1:,.0f}/s", f"{n / f2:,.0f}/s",
                     f"{f1 / f2:.2f}x", "", machine()])
    table(rows, ["what", "width 1", "width 2", "speed-up", "parent CPU per input (w1 / w2)", "machine after"])
    if args.only == "kernel":
        return None

    from wbcore_runtime.dispatch import fabric

    n = 100_000
    blob = b"x" * 1000
    base = peak = _rss_mib()
    t0 = time.perf_counter()
    for i, _r in enumerate(fabric.map(rt, "kup", (blob + b"%06d" % j for j in range(n)), kind="kernel",
                                      width=2)):
        if i % 2000 == 0:
            peak = max(peak, _rss_mib())
    el = time.perf_counter() - t0
    print(f"\n100,000 × 1 KiB kernel inputs streamed in {el:.1f} s: parent RSS {base:.0f} MiB → peak "
          f"{peak:.0f} MiB (growth {peak - base:.0f} MiB; {machine()})")

    rows = []
    for count in (1_000, 10_000, 100_000):
        if count > args.max_n:
            break
        inputs = [{"stdin": "the quick brown fox"}] * count
        th = _run(rt, "upper", inputs, width=2, engine="threads")[0]
        pr = _run(rt, "upper", inputs, width=2, engine="local")[0]
        rows.append([f"{count:,}", f"{th:.2f} s ({th / count * 1e6:.0f} µs/call)",
                     f"{pr:.2f} s ({pr / count * 1e6:.0f} µs/call)", f"{th / pr:.2f}x", machine()])
    print()
    table(rows,
          ["short calls", "threads, width 2", "processes, width 2", "processes faster by", "machine after"])
    if args.ray:
        _ray(rt, args)
    return None


def _ray(rt, args) -> None:
    """Kernel calls on a 2-node Ray cluster of this machine, by chunk size, beside local."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 << 20,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=80 << 20)
        cluster.wait_for_nodes(timeout=120)
        os.environ["WB_RAY_ADDRESS"] = cluster.address
        print(f"\n2-node Ray cluster up in {time.perf_counter() - t0:.1f} s ({machine()})")
        data = [b"hello fab %06d" % i for i in range(1000)]
        n = args.ray_n
        rows = []
        el, _ = _run(rt, "kup", islice(cycle(data), n), kind="kernel", width=2)
        rows.append(["local, width 2, adaptive", f"{n / el:,.0f}/s", f"{n / STEADY[-1]:,.0f}/s", machine()])
        for batch in (1, 64, 512, 4096, None):
            count = min(n, 2000) if batch == 1 else n
            el, _ = _run(rt, "kup", islice(cycle(data), count), kind="kernel", width=2, engine="ray",
                         batch=batch)
            label = (f"ray, width 2, {batch or 'adaptive'} per call"
                     + (f" ({count:,} inputs)" if count != n else ""))
            per_call = f" · {STEADY[-1] / count * 2 * 1e3:.2f} ms per call" if batch == 1 else ""
            rows.append([label, f"{count / el:,.0f}/s", f"{count / STEADY[-1]:,.0f}/s{per_call}", machine()])
        print(f"\n{n:,} kernel calls (16 B) on the 2-node cluster:")
        table(rows, ["engine, chunk size", "rate (actor start-up included)", "rate after the first result",
                     "machine after"])
    finally:
        import shutil

        from wbcore_ray.actor import node_home

        ids = [n["NodeID"] for n in ray.nodes()] if ray.is_initialized() else []
        ray.shutdown()
        cluster.shutdown()
        os.environ.pop("WB_RAY_ADDRESS", None)
        for nid in ids:  # the nodes' homes (module and compiled form) go with the cluster
            shutil.rmtree(node_home(nid), ignore_errors=True)


if __name__ == "__main__":
    main()
