"""Restoring a named micro-VM snapshot (``wbx snapshot restore``) against its floor, a cold boot.

    .venv/bin/python bench/snapshots.py [--restores 10] [--cold 2]

In one run, in a fresh home (the tier's image and snapshot come from ``$WB_MICROVM_CACHE``
when set, else are built first, outside every figure):

- ``cold boot``: a new QEMU booting the guest image's kernel to the guest agent's answer
  (what a sandbox costs with no snapshot), ``--cold`` times;
- ``save``: ``wbx snapshot save bench --run …`` (restore the tier's snapshot, run the step,
  migrate to the store), once;
- ``restore``: ``snapshots.restore`` of that snapshot with no command — a new sandboxed
  QEMU reading the migration stream to the agent's authenticated answer (``restore_s``, the
  figure ``wbx snapshot restore --json`` reports) — ``--restores`` times;
- ``restore + command``: the same plus one ``cat`` of the state the save left, teardown
  included (the whole ``wbx snapshot restore bench -- cat …`` minus the CLI's start-up).

The accelerator (kvm or tcg) and the machine's load are printed with the rows.
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
from _common import machine, table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--restores", type=int, default=10)
    ap.add_argument("--cold", type=int, default=2)
    args = ap.parse_args()

    from wbcore_microvm import image, snapshots, tiers
    from wbcore_microvm import vm as _vm

    from wbcore_runtime.wire import frames
    from wbcore_runtime.runtime import Runtime

    ok, why = tiers._probe_tools()
    if not ok:
        sys.exit(f"microvm unavailable: {why}")
    home = Path(tempfile.mkdtemp(prefix="wb-bench-snap-"))
    os.environ["WB_MICROVM_POOL"] = "0"
    rt = Runtime.open(home=home)
    base = tiers.prepare(image.cache_root(rt.home, dict(rt.env)))

    cold: list[float] = []
    for _ in range(args.cold):
        t0 = time.monotonic()
        vm = _vm.Vm(base.image, base.accel, frames.new_secret(), sandbox=False)
        try:
            end = t0 + tiers.COLD_BOOT_S
            vm.connect(end)
            vm.handshake(end)
            cold.append(time.monotonic() - t0)
        finally:
            vm.kill()

    t0 = time.monotonic()
    saved, _, _ = snapshots.save(rt, "bench", snapshots.parse_steps(
        ["sh -c 'mkdir -p /tmp/tk && echo warmed > /tmp/tk/state'"], []))
    save_s = time.monotonic() - t0

    restore: list[float] = []
    whole: list[float] = []
    for _ in range(args.restores):
        restore.append(snapshots.restore(rt, "bench", []).restore_s)
    for _ in range(args.restores):
        t0 = time.monotonic()
        r = snapshots.restore(rt, "bench", ["cat", "/tmp/tk/state"])
        whole.append(time.monotonic() - t0)
        assert r.stdout == b"warmed\n", r

    def ms(xs: list[float]) -> tuple[str, str]:
        s = sorted(xs)
        return f"{statistics.median(s) * 1000:,.0f} ms", f"{s[(len(s) * 9) // 10] * 1000:,.0f} ms"

    print(f"microvm snapshots, accelerator {base.accel} ({_vm.qemu_version()}), {_vm.MEMORY_MB} MiB guest; "
          f"snapshot {saved.size >> 20} MiB")
    table([["cold boot (floor)", str(len(cold)), *ms(cold)],
           ["save (restore + step + migrate)", "1", f"{save_s * 1000:,.0f} ms", ""],
           ["restore (to the agent's answer)", str(len(restore)), *ms(restore)],
           ["restore + cat + teardown", str(len(whole)), *ms(whole)]],
          ["what", "n", "median", "p90"])
    print(f"machine after: {machine()}")
    snapshots.delete(rt.home, "bench")


if __name__ == "__main__":
    main()
