"""A zig cache warmed once per machine (pytest's cache dir, or $WB_ZIG_CACHE), shared by the tests,
in the build sandbox the installed plugins serve (skipped, saying why, where there is none)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def zig_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              build_sandbox: Any) -> Path:
    from wbcore_lane_zig import cache
    from wbcore_lane_zig.toolchain import available, find

    av = available()
    if not av.ok:
        pytest.skip(f"zig lanes unavailable here: {av.reason}")
    zig = find()
    assert not isinstance(zig, str)
    env = os.environ.get("WB_ZIG_CACHE")
    if env:
        target = Path(env)
    elif getattr(request.config, "cache", None) is not None:
        target = Path(request.config.cache.mkdir("wb-zig")) / f"zig-{zig.version}"
    else:  # -p no:cacheprovider: pytest's per-user temp root outlives one run
        target = tmp_path_factory.getbasetemp().parent / "wb-zig-cache" / f"zig-{zig.version}"
    cache.warm(zig, target, build_sandbox)  # ≈1 minute the first time on a machine, then instant
    return target
