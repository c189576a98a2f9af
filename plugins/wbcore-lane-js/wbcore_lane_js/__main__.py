"""``python -m wbcore_lane_js fetch [ts|svelte]``: fetch the pinned compilers from npm once
(``dev.py setup`` and CI run it, so test builds need no network). Without a name: ts."""

from __future__ import annotations

import sys

USAGE = ("usage: python -m wbcore_lane_js fetch [ts] [--from typescript-X.tgz]\n"
         "       python -m wbcore_lane_js fetch svelte [--from <pkg>-<version>.tgz ...]\n"
         "  (into $WB_NPM_CACHE or ~/.cache/wbcore/npm)\n"
         "  --from: a tarball made by `npm pack <pkg>@<version>` (checked against the same pin)")


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"]:
        print(USAGE, file=sys.stderr)
        return 2
    rest = argv[1:]
    which = rest.pop(0) if rest and rest[0] in ("ts", "svelte") else "ts"
    if len(rest) % 2 or any(flag != "--from" for flag in rest[0::2]) or (which == "ts" and len(rest) > 2):
        print(USAGE, file=sys.stderr)
        return 2
    from pathlib import Path

    from wbcore_runtime.contract.errors import WbError

    from wbcore_lane_js import svelte, ts

    tarballs = [Path(p) for p in rest[1::2]]

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    try:
        if which == "svelte":
            where = svelte.fetch(progress=say, tarballs=tarballs)
            gone = svelte.missing()
            if gone:
                print(f"wbcore_lane_js: {svelte.compiler_ok()}", file=sys.stderr)
                return 1
            print(f"svelte {svelte.SVELTE.version} (+ {', '.join(p.tgz for p in svelte.DEPS)}): {where}")
            return 0
        path = ts.fetch(progress=say, tarball=tarballs[0] if tarballs else None)
    except WbError as exc:
        print(f"wbcore_lane_js: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"typescript {ts.TYPESCRIPT_VERSION}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
