"""``python -m wb_lane_zig warm``: fill zig's cache once (CI does this before the tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[:1] != ["warm"]:
        print("usage: python -m wb_lane_zig warm   (uses $WB_ZIG_CACHE or $WB_HOME/cache/zig-<version>)", file=sys.stderr)
        return 2
    from wb_lane_zig import cache
    from wb_lane_zig.toolchain import find

    zig = find()
    if isinstance(zig, str):
        print(zig, file=sys.stderr)
        return 1
    home = Path(os.environ.get("WB_HOME", "~/.workbooks")).expanduser()
    target = cache.cache_dir(zig, home, os.environ)
    spent = cache.warm(zig, target, progress=lambda m: print(m, file=sys.stderr))
    print(f"zig cache {target}: " + (f"warmed in {spent:.1f}s" if spent else "already warm"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
