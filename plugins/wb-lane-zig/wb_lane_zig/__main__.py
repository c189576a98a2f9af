"""``python -m wb_lane_zig warm``: fill zig's cache once (CI does this before the tests)."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv[:1] != ["warm"]:
        print("usage: python -m wb_lane_zig warm   (uses $WB_ZIG_CACHE or $WB_HOME/cache/zig-<version>)", file=sys.stderr)
        return 2
    from wbcore.errors import WbError
    from wbcore.runtime import Runtime

    from wb_lane_zig import cache
    from wb_lane_zig.toolchain import find

    zig = find()
    if isinstance(zig, str):
        print(zig, file=sys.stderr)
        return 1
    runtime = Runtime.open()  # the installed plugins: the build sandbox comes from one of them
    try:
        box = runtime.build_sandbox()
    except WbError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    target = cache.cache_dir(zig, runtime.home, os.environ)
    spent = cache.warm(zig, target, box, progress=lambda m: print(m, file=sys.stderr))
    print(f"zig cache {target}: " + (f"warmed in {spent:.1f}s" if spent else "already warm"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
