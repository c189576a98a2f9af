"""``python -m wb_lane_js fetch``: fetch the pinned TypeScript compiler for the ts lane once
(``dev.py setup`` and CI run it, so test builds need no network)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"] or len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--from"):
        print("usage: python -m wb_lane_js fetch [--from typescript-X.tgz]   (into $WB_NPM_CACHE or ~/.cache/wbcore/npm)\n"
              "  --from: a tarball made by `npm pack typescript@<version>` (checked against the same pin)", file=sys.stderr)
        return 2
    from pathlib import Path

    from wbcore.errors import WbError

    from wb_lane_js import ts

    try:
        tarball = Path(argv[2]) if len(argv) == 3 else None
        path = ts.fetch(progress=lambda m: print(m, file=sys.stderr), tarball=tarball)
    except WbError as exc:
        print(f"wb_lane_js: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"typescript {ts.TYPESCRIPT_VERSION}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
