"""``python -m wbcore_lane_go warm``: warm the machine's Go build cache once (``dev.py setup`` and
CI do this), into ``$WB_GO_CACHE`` or ``~/.cache/wbcore/go``; each home's first Go build then
starts from a checked copy of it (``wbcore_lane_go.cache``)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv != ["warm"]:
        print("usage: python -m wbcore_lane_go warm   (into $WB_GO_CACHE or ~/.cache/wbcore/go)",
              file=sys.stderr)
        return 2
    from wbcore_runtime.contract.sandbox import warm_command
    from wbcore_runtime.runtime import Runtime

    from wbcore_lane_go import cache
    from wbcore_lane_go.lane import find

    go = find()
    if isinstance(go, str):
        print(go, file=sys.stderr)
        return 1
    target = cache.machine_dir(os.environ)
    return warm_command("go build cache", lambda runtime, box: (target, cache.warm(
        go.goroot, go.version, target, box, for_sandbox=False,
        progress=lambda m: print(m, file=sys.stderr))), open_runtime=Runtime.open)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
