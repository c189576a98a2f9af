"""Per-call cost of each isolation tier: instance (in this process) vs os_process (warm pool).

    .venv/bin/python bench/tiers.py [--calls 200] [--rounds 5]

Each row calls the tier driver directly with a resolved ``CommandRequest`` (what
``dispatch.call_command`` hands it), so the figure is the tier's own cost: for instance a
fresh store in this process; for os_process the frames to a warm sandboxed worker and
back plus a fresh store there. Tiers are interleaved round by round (``--rounds`` rounds
of ``--calls`` calls each) so machine load hits both alike; the table gives the median
of the per-round medians, the p90 over every call, and CPU per call: this process's CPU
plus, for os_process, the worker's own (each result reports it). ``cold`` is the first
call on a new pool: sandbox + Python + wasmtime import + handshake + compile.

Guests: ``echo`` (a WAT command copying stdin, empty stdin), the shipped ``b64``
toolkit (built by the wat lane) encoding 4 KiB, and a ``kv`` guest making one bridged
``wb.kv`` get (needs wb-brokers-state).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine, table  # noqa: E402

ECHO_WAT = """(module
  (import "wasi_snapshot_preview1" "fd_read" (func $r (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "_start") (local $n i32)
    (loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $r (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.eqz (local.get $n)) (then (return)))
      (i32.store (i32.const 16) (i32.const 1024)) (i32.store (i32.const 20) (local.get $n))
      (drop (call $w (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
      (br $l))))"""


def kv_wat(req: bytes) -> str:
    data = "".join(f"\\{b:02x}" for b in req)
    return f"""(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 64) "{data}")
  (func (export "_start") (local $n i64)
    (local.set $n (call $kv (i32.const 64) (i32.const {len(req)}) (i32.const 4096) (i32.const 60000)))
    (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import wasmtime

    from wbcore import builder
    from wbcore.calls import CommandRequest, Principal
    from wbcore.policy import profile
    from wbcore.runtime import Runtime
    from wb_process.pool import Pool
    from wb_process.tiers import OsProcessTier

    work = Path(tempfile.mkdtemp(prefix="wb-bench-tiers-"))
    roots = work / "toolkits"
    shutil.copytree(ROOT / "toolkits" / "b64", roots / "b64")
    rt = Runtime.open(home=work / "home", roots=[roots], cwd=work)
    if not rt.tiers.get("os_process").available().ok:
        print(f"os_process unavailable here: {rt.tiers.get('os_process').available().reason}")
        return
    principal = Principal(toolkit="bench")

    def req(sha: str, stdin: bytes = b"", caps: frozenset[str] = frozenset(), prof: str = "compute") -> CommandRequest:
        return CommandRequest(name="bench", sha256=sha, artifact=rt.artifacts.path(sha), argv=(), stdin=stdin,
                              profile=profile(prof), timeout_s=10.0, principal=principal, caps=caps)

    guests = {"echo": req(rt.artifacts.put_bytes(wasmtime.wat2wasm(ECHO_WAT)).sha256)}
    built = builder.build(rt, "b64")
    guests["b64 4 KiB"] = req(built.sha256, bytes(range(256)) * 16)
    try:
        import cbor2
        import wb_brokers_state  # noqa: F401

        ctx = rt.dock.context(principal=principal, caps={"kv"}, timeout=5)
        rt.dock.call(ctx, "kv", "put", {"key": "k", "value": b"v" * 32})
        kv = rt.artifacts.put_bytes(wasmtime.wat2wasm(kv_wat(cbor2.dumps({"op": "get", "key": "k"}))))
        guests["kv get (bridged)"] = req(kv.sha256, caps=frozenset({"kv"}), prof="minimal")
    except ImportError:
        print("(no kv row: wb-brokers-state is not installed)")

    print(f"machine: {machine()}")
    pool = Pool(2)
    instance = rt.tiers.get("instance").factory(rt)
    osp = OsProcessTier(rt, pool)
    t0 = time.perf_counter()
    osp.call(guests["echo"])
    cold = time.perf_counter() - t0

    def worker_cpu() -> float:
        return sum(w.cpu for w in pool.workers())

    rows = []
    for gname, request in guests.items():
        instance.call(request)
        osp.call(request)  # every worker compiles it once
        osp.call(request)
        walls: dict[str, list[float]] = {"instance": [], "os_process": []}
        medians: dict[str, list[float]] = {"instance": [], "os_process": []}
        cpus: dict[str, list[float]] = {"instance": [], "os_process": []}
        for _ in range(args.rounds):
            for tname, tier in (("instance", instance), ("os_process", osp)):
                c0, w0 = time.process_time(), worker_cpu()
                one = []
                for _ in range(args.calls):
                    t = time.perf_counter()
                    tier.call(request)
                    one.append(time.perf_counter() - t)
                cpu = time.process_time() - c0 + (worker_cpu() - w0 if tname == "os_process" else 0.0)
                walls[tname] += one
                medians[tname].append(statistics.median(one))
                cpus[tname].append(cpu / args.calls)
        base = statistics.median(medians["instance"])
        for tname in ("instance", "os_process"):
            s = sorted(walls[tname])
            med = statistics.median(medians[tname])
            rows.append([gname, tname, f"{med * 1e3:.3f} ms", f"{s[len(s) * 9 // 10] * 1e3:.3f} ms",
                         f"{statistics.median(cpus[tname]) * 1e3:.3f} ms", f"{med / base:.1f}x"])
    pool.close()
    table(rows, ["guest", "tier", "wall median", "wall p90", "cpu/call", "vs instance"])
    print(f"\nos_process cold start (new pool, first call): {cold * 1e3:.0f} ms")
    print(f"{args.rounds} interleaved rounds x {args.calls} calls per tier and guest; machine after: {machine()}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
