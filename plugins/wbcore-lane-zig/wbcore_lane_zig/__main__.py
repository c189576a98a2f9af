"""``python -m wbcore_lane_zig warm``: fill zig's cache once (CI does this before the tests).
``python -m wbcore_lane_zig fetch-jq [--from SDIST]``: fetch the jq built-in's pinned sources once."""

from __future__ import annotations

import os
import sys


def fetch_jq(argv: list[str]) -> int:
    """``fetch-jq [--from jq-1.13.0.tar.gz]``: the jq built-in's pinned sources, once."""
    from pathlib import Path

    from wbcore_runtime.contract.errors import WbError

    from wbcore_lane_zig.builtins import jqsrc

    if len(argv) not in (0, 2) or (argv and argv[0] != "--from"):
        print(f"usage: python -m wbcore_lane_zig fetch-jq [--from jq-{jqsrc.SDIST_VERSION}.tar.gz]   (into "
              "$WB_JQ_CACHE or ~/.cache/wbcore/jq)\n  --from: the PyPI sdist, e.g. from `pip download "
              f"--no-deps --no-binary :all: jq=={jqsrc.SDIST_VERSION}`",
              file=sys.stderr)
        return 2
    try:
        path = jqsrc.fetch(progress=lambda m: print(m, file=sys.stderr),
                           sdist=Path(argv[1]) if argv else None)
    except WbError as exc:
        print(f"wbcore_lane_zig: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"jq {jqsrc.JQ_VERSION} sources: {path}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["fetch-jq"]:
        return fetch_jq(argv[1:])
    if argv[:1] != ["warm"]:
        print("usage: python -m wbcore_lane_zig warm   (uses $WB_ZIG_CACHE or $WB_HOME/cache/zig-<version>)",
              file=sys.stderr)
        return 2
    from pathlib import Path

    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.runtime import Runtime
    from wbcore_runtime.contract.sandbox import BuildSandboxDriver, warm_command

    from wbcore_lane_zig import cache
    from wbcore_lane_zig.toolchain import find

    zig = find()
    if isinstance(zig, str):
        print(zig, file=sys.stderr)
        return 1

    def warm(runtime: RuntimeServices, box: BuildSandboxDriver) -> tuple[Path, float]:
        target = cache.cache_dir(zig, runtime.home, os.environ)
        return target, cache.warm(zig, target, box, progress=lambda m: print(m, file=sys.stderr))

    return warm_command("zig cache", warm, open_runtime=Runtime.open)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
