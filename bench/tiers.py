"""Per-call cost of each isolation tier: instance (in this process) vs os_process (warm pool)
vs container (a throwaway bubblewrap container per call).

    .venv/bin/python bench/tiers.py [--calls 200] [--rounds 5] [--container-calls 20] [--microvm-calls 10]

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
``wb.kv`` get (needs wbcore-brokers-state).

The container tier has no warm state but its root and its bwrap probe: every call starts a
new container (and, for wasm, the root's python3 + wasmtime import + compile), so it is
measured apart, ``--container-calls`` calls per guest, wall time only (a container's
processes are reaped inside its pid namespace, so ``RUSAGE_CHILDREN`` would undercount
their CPU). ``cold`` is its first call in this process (root recipe hashed and
written, bwrap probed); ``warm`` the median after. Its rows: the wasm guests (the kv get
crosses the container's caps bridge: pipes to this process's Dock) and a posix
``sha256sum`` of 4 KiB from the Debian root.

The microvm tier (wbcore-microvm) runs posix commands only: ``cold`` is a VM booted from its
kernel to the guest agent's answer plus one ``sha256sum`` call (the image and snapshot are
prepared first, outside the figure, in ``$WB_MICROVM_CACHE``); ``restored`` is the tier's
own call path — a new QEMU restored from the snapshot, handshake, exec, teardown —
``--microvm-calls`` times per guest (``sha256sum`` of 4 KiB, and a bridged ``wb-cap kv``
get with wbcore-brokers-state); ``pooled`` is a call that finds a VM the tier's pool restored
and authenticated ahead of it (the bench waits for the pool between calls). The accelerator (kvm
or tcg) is printed with the rows.
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
from _common import ROOT, machine, table

from wbcore_testing.conformance import ECHO_WAT, kv_wat

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--container-calls", type=int, default=20)
    ap.add_argument("--microvm-calls", type=int, default=10)
    args = ap.parse_args()

    import wasmtime
    from wbcore_process.pool import Pool
    from wbcore_process.tiers import OsProcessTier

    from wbcore_runtime.build import builder
    from wbcore_runtime.contract.calls import CommandRequest, Principal
    from wbcore_runtime.trust.policy import profile
    from wbcore_runtime.runtime import Runtime

    work = Path(tempfile.mkdtemp(prefix="wb-bench-tiers-"))
    roots = work / "toolkits"
    shutil.copytree(ROOT / "toolkits" / "b64", roots / "b64")
    rt = Runtime.open(home=work / "home", roots=[roots], cwd=work)
    if not rt.tiers.get("os_process").available().ok:
        print(f"os_process unavailable here: {rt.tiers.get('os_process').available().reason}")
        return
    principal = Principal(toolkit="bench")

    def req(sha: str, stdin: bytes = b"", caps: frozenset[str] = frozenset(),
            prof: str = "compute") -> CommandRequest:
        return CommandRequest(name="bench", sha256=sha, artifact=rt.artifacts.path(sha), argv=(), stdin=stdin,
                              profile=profile(prof), timeout_s=10.0, principal=principal, caps=caps)

    guests = {"echo": req(rt.artifacts.put_bytes(wasmtime.wat2wasm(ECHO_WAT)).sha256)}
    built = builder.build(rt, "b64")
    guests["b64 4 KiB"] = req(built.sha256, bytes(range(256)) * 16)
    try:
        import cbor2
        import wbcore_brokers_state  # noqa: F401

        ctx = rt.dock.context(principal=principal, caps={"kv"}, timeout=5)
        rt.dock.call(ctx, "kv", "put", {"key": "k", "value": b"v" * 32})
        kv = rt.artifacts.put_bytes(wasmtime.wat2wasm(kv_wat(cbor2.dumps({"op": "get", "key": "k"}))))
        guests["kv get (bridged)"] = req(kv.sha256, caps=frozenset({"kv"}), prof="minimal")
    except ImportError:
        print("(no kv row: wbcore-brokers-state is not installed)")

    print(f"machine: {machine()}")
    from wbcore_runtime.contract.guest import sandbox_caps

    pool = Pool(2, sandbox_caps(rt, "os_process"))  # the caps bridge's guest side, as the tier binds it
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
    print(f"{args.rounds} interleaved rounds x {args.calls} calls per tier and guest; machine after: "
          f"{machine()}")
    if args.container_calls > 0:
        container(rt, guests, req, args.container_calls)
    if args.microvm_calls > 0:
        microvm(rt, req, args.microvm_calls)
    shutil.rmtree(work, ignore_errors=True)


def container(rt: object, guests: dict, req: object, calls: int) -> None:
    """The container tier: a new bubblewrap container per call (see the module docstring)."""
    import json

    from wbcore_runtime.build import builder

    try:
        from wbcore_container.tiers import ContainerTier, available
    except ImportError:
        print("\n(no container rows: wbcore-container is not installed)")
        return
    avail = available()
    if not avail.ok:
        print(f"\n(no container rows: {avail.reason})")
        return
    tier = ContainerTier(rt)  # type: ignore[arg-type]
    posix = rt.artifacts.put_bytes(builder.POSIX_MAGIC + json.dumps({"cli_bin": "sha256sum"}).encode())  # type: ignore[attr-defined]
    rows_in = {"echo": guests["echo"], "b64 4 KiB": guests["b64 4 KiB"],
               "posix sha256sum 4 KiB": req(posix.sha256, bytes(range(256)) * 16)}  # type: ignore[operator]
    if "kv get (bridged)" in guests:
        rows_in["kv get (bridged)"] = guests["kv get (bridged)"]
    t0 = time.perf_counter()
    tier.call(rows_in["echo"])
    cold = time.perf_counter() - t0
    rows = []
    for gname, request in rows_in.items():
        tier.call(request)
        walls = []
        for _ in range(calls):
            t = time.perf_counter()
            tier.call(request)
            walls.append(time.perf_counter() - t)
        s = sorted(walls)
        rows.append([gname, "container", f"{statistics.median(walls) * 1e3:.1f} ms",
                     f"{s[len(s) * 9 // 10] * 1e3:.1f} ms"])
    print(f"\ncontainer tier ({avail.reason})")
    table(rows, ["guest", "tier", "warm median", "warm p90"])
    print("\ncontainer cold start (first call in this process: root recipe + bwrap probe + container): "
          f"{cold * 1e3:.0f} ms")
    print(f"{calls} calls per guest, sequential; machine after: {machine()}")


def microvm(rt: object, req: object, calls: int) -> None:
    """The microvm tier: cold boot + call, then calls restored from the snapshot."""
    import dataclasses
    import json
    import os

    from wbcore_runtime.build import builder
    from wbcore_runtime.wire import frames

    try:
        from wbcore_microvm import image, tiers, vm
    except ImportError:
        print("\n(no microvm rows: wbcore-microvm is not installed)")
        return
    avail = tiers.available()
    if not avail.ok:
        print(f"\n(no microvm rows: {avail.reason})")
        return
    cache = image.cache_root(rt.home, dict(os.environ))  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    snap = tiers.prepare(cache)
    prep = time.perf_counter() - t0
    tier = tiers.MicrovmTier(rt)  # type: ignore[arg-type]
    data = bytes(range(256)) * 16
    posix = rt.artifacts.put_bytes(builder.POSIX_MAGIC + json.dumps({"cli_bin": "sha256sum"}).encode())  # type: ignore[attr-defined]
    rows_in = {"posix sha256sum 4 KiB": req(posix.sha256, data)}  # type: ignore[operator]
    try:
        import wbcore_brokers_state  # noqa: F401

        cap = rt.artifacts.put_bytes(builder.POSIX_MAGIC + json.dumps({"cli_bin": "wb-cap"}).encode())  # type: ignore[attr-defined]
        kv = req(cap.sha256, b"", frozenset({"kv"}), "minimal")  # type: ignore[operator]
        rows_in["wb-cap kv get (bridged)"] = dataclasses.replace(
            kv, argv=("kv", json.dumps({"op": "get", "key": "k"})))
    except ImportError:
        print("(no microvm kv row: wbcore-brokers-state is not installed)")
    # cold: boot from the kernel to the agent's Pong, then one call
    t0 = time.perf_counter()
    v = vm.Vm(snap.image, snap.accel, snap.secret, sandbox=False)
    try:
        end = time.monotonic() + tiers.COLD_BOOT_S
        v.connect(end)
        v.handshake(end)
        booted = time.perf_counter() - t0
        v.send_frame(frames.seal(frames.EXEC, snap.secret,
                                 {"id": 1, "argv": ["sha256sum"], "deadline_ms": 10000}, data))
        kind, _ = v.recv(time.monotonic() + 30)
        assert kind == frames.EXEC_RESULT
        cold = time.perf_counter() - t0
    finally:
        v.kill()
    rows = []
    for gname, request in rows_in.items():
        tier.call(request)
        walls: dict[str, list[float]] = {"fresh": [], "pooled": []}
        for how in ("fresh", "pooled"):
            # fresh: no pool (each call restores its VM); pooled: one VM restored ahead
            tiers._pools[snap.path] = pool = tiers.Pool(snap, 0 if how == "fresh" else 1)
            for _ in range(calls):
                if how == "pooled" and not pool.wait_ready(tiers.RESTORE_S):
                    continue
                t = time.perf_counter()
                res = tier.call(request)
                walls[how].append(time.perf_counter() - t)
                assert res.usage.isolation == snap.accel
            pool.close()
        cells = [gname, f"microvm ({snap.accel})"]
        for how in ("fresh", "pooled"):
            s = sorted(walls[how]) or [float("nan")]
            cells += [f"{statistics.median(s) * 1e3:.0f} ms", f"{s[len(s) * 9 // 10] * 1e3:.0f} ms"]
        rows.append(cells)
    print(f"\nmicrovm tier, accelerator {snap.accel} ({avail.reason})")
    table(rows, ["guest", "tier", "restored median", "restored p90", "pooled median", "pooled p90"])
    print(f"\nmicrovm cold: boot to the agent's answer {booted:.2f} s, + first call {cold:.2f} s "
          f"(accelerator {snap.accel}); snapshot when built: cold boot {snap.cold_boot_s:.1f} s, "
          f"migrate {snap.snapshot_s:.2f} s, {snap.path.stat().st_size >> 20} MiB; prepare here {prep:.2f} s")
    print(f"{calls} restored calls per guest, sequential (each: new QEMU from the snapshot, handshake, exec, "
          f"teardown); machine after: {machine()}")


if __name__ == "__main__":
    main()
