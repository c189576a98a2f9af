"""``python -m wbcore_microvm prepare [--cache DIR]``: build the guest image, probe the
accelerator, boot cold once and snapshot, printing each step and its time. It fills the cache
the tier reads (``image.cache_root``: ``$WB_MICROVM_CACHE``, else the home's ``tiers/microvm``),
so the first call after it restores instead of booting cold. CI runs it once before the slow
suite, with ``WB_MICROVM_CACHE`` shared by every test home."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wbcore_microvm")
    ap.add_argument("command", choices=["prepare"])
    ap.add_argument("--cache", type=Path, default=None,
                    help="the image and snapshot cache (default: the one the tier reads: $WB_MICROVM_CACHE, "
                         "else $WB_HOME/tiers/microvm of the home wbx would use here)")
    ap.add_argument(
        "--shell-mounts", action="store_true",
        help="also the snapshot with virtio-9p slots that wbx shell --tier microvm --mount restores",
    )
    args = ap.parse_args(argv)
    from wbcore_microvm import tiers
    from wbcore_runtime.contract.errors import WbError

    if args.cache is not None:
        cache = args.cache
    else:
        from wbcore_microvm.image import cache_root
        from wbcore_runtime.store.home import choose

        home = choose(os.environ)
        cache = cache_root(home.path, dict(os.environ))
        where = ("from $WB_MICROVM_CACHE" if os.environ.get("WB_MICROVM_CACHE")
                 else "in the home " + home.describe())
        print(f"microvm: cache {cache} ({where})", flush=True)
    ok, why = tiers._probe_tools()
    if not ok:
        print(f"microvm: unavailable: {why}", file=sys.stderr)
        return 1
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"microvm: {time.monotonic() - t0:6.1f} s  {msg}", flush=True)

    try:
        snap = tiers.prepare(cache, progress=say)
        if args.shell_mounts:
            from wbcore_microvm.shell import MOUNT_SLOTS

            shells = tiers.prepare(cache, progress=say, mount_slots=MOUNT_SLOTS)
            say(f"shell snapshot with {MOUNT_SLOTS} virtio-9p slots at {shells.path}")
    except WbError as exc:
        print(f"microvm: {exc.message}", file=sys.stderr)
        return 1
    say(
        f"ready: accelerator {snap.accel}, image {snap.image.digest[:12]} "
        f"(kernel {snap.image.kernel_version}), "
        f"cold boot {snap.cold_boot_s:.1f} s, snapshot {snap.snapshot_s:.2f} s "
        f"({snap.path.stat().st_size >> 20} MiB) at {snap.path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
