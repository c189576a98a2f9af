"""``python -m wb_lane_go warm``: warm the machine's Go build cache once (``dev.py setup`` and
CI do this), into ``$WB_GO_CACHE`` or ``~/.cache/wbcore/go``; each home's first Go build then
starts from a checked copy of it (``wb_lane_go.cache``)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv != ["warm"]:
        print("usage: python -m wb_lane_go warm   (into $WB_GO_CACHE or ~/.cache/wbcore/go)", file=sys.stderr)
        return 2
    from wbcore.errors import WbError
    from wbcore.runtime import Runtime

    from wb_lane_go import cache
    from wb_lane_go.lane import find

    go = find()
    if isinstance(go, str):
        print(go, file=sys.stderr)
        return 1
    runtime = Runtime.open()  # the installed plugins: the build sandbox comes from one of them
    try:
        box = runtime.build_sandbox()
        target = cache.machine_dir(os.environ)
        spent = cache.warm(go.goroot, go.version, target, box, for_sandbox=False,
                           progress=lambda m: print(m, file=sys.stderr))
    except WbError as exc:
        print(f"wb_lane_go: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"go build cache {target}: " + (f"warmed in {spent:.1f}s" if spent else "already warm"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
