"""Zig's global cache under ``$WB_HOME``: warmed once by first-party source, then shared read-only.

The first compile on a machine builds wasi-libc and compiler_rt (≈40–50 s). The warm-up
compiles the package's own ``warmup/hello.c`` and ``warmup/hello.zig`` with each lane's
default flags, inside the sandbox, into a fresh ``/out/cache``, which then replaces the
cache folder atomically. Toolkit builds see that folder through a private overlay: they
hit the cache, and whatever they add or change vanishes with the sandbox, so an untrusted
build can never poison what the next build links.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from wbcore_runtime.store import leftovers, locks
from wbcore_runtime.build import BuildFailed
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver, SandboxLimits

from wbcore_lane_zig.toolchain import Zig

WARMUP = Path(__file__).parent / "warmup"
#: What a warm cache was warmed with; a change of recipe warms again.
RECIPE = "r1: cc wasm32-wasi -Oz -s; build-exe wasm32-wasi ReleaseSmall -fstrip"


def cache_dir(zig: Zig, home: Path, env: Mapping[str, str]) -> Path:
    """``$WB_ZIG_CACHE`` if set (one cache shared by many homes, e.g. in CI), else
    ``$WB_HOME/cache/zig-<version>``."""
    base = env.get("WB_ZIG_CACHE")
    return Path(base) if base else home / "cache" / f"zig-{zig.version}"


def stamp(zig: Zig) -> str:
    """The recipe plus the identity of this zig installation. Zig's cache manifests
    record the inode and mtime of every lib/ source they compiled; a reinstalled zig
    (a new venv, a fresh clone) misses them all and rebuilds wasi-libc on every build,
    so a cache warmed by another installation counts as cold."""
    parts = [RECIPE]
    for path in (zig.binary, zig.root / "lib"):
        st = path.stat()
        parts.append(f"{os.path.realpath(path)} {st.st_ino} {st.st_mtime_ns}")
    return "\n".join(parts)


def is_warm(cache: Path, zig: Zig) -> bool:
    try:
        return (cache / ".wb-warm").read_text() == stamp(zig)
    except OSError:
        return False


def warm_argvs() -> list[list[str]]:
    return [
        ["/zig/zig", "cc", "--target=wasm32-wasi", "-Oz", "-s", "-o", "/tmp/hello-c.wasm", "/warmup/hello.c",
         "-lm"],
        ["/zig/zig", "build-exe", "-target", "wasm32-wasi", "-O", "ReleaseSmall", "-fstrip",
         "-femit-bin=/tmp/hello-zig.wasm", "/warmup/hello.zig"],
    ]


def warm(
    zig: Zig,
    cache: Path,
    box: BuildSandboxDriver,
    *,
    progress: Callable[[str], None] | None = None,
    wall_seconds: float = 900.0,
) -> float:
    """Warm ``cache`` in ``box`` (the runtime's build sandbox) unless it is warm already;
    returns the seconds spent (0 when warm)."""
    if is_warm(cache, zig):
        return 0.0
    cache.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # one warm-up at a time; the others wait (as long as one may take) and reuse it
    with locks.held(cache.parent / f".{cache.name}.lock", what=f"zig {zig.version} warm-up",
                    wait_s=wall_seconds + 60):
        if is_warm(cache, zig):
            return 0.0
        if progress:
            progress(f"zig {zig.version}: building wasi-libc and compiler_rt into {cache} (once, about a "
                     "minute)")
        limits = SandboxLimits(wall_seconds=wall_seconds, cpu_seconds=int(wall_seconds) * 2, open_files=8192,
                        processes=512, out_bytes=2 << 30, out_files=50_000, tmp_bytes=2 << 30)
        staging = Path(tempfile.mkdtemp(prefix=f".{cache.name}.warming-", dir=cache.parent))
        try:
            seed: Path | None = None
            for argv in warm_argvs():
                step = Path(tempfile.mkdtemp(prefix="step-", dir=staging))
                res = box.run(
                    argv,
                    binds=[Bind(zig.root, "/zig"), Bind(WARMUP, "/warmup")],
                    out_dir=step,
                    seed_out=seed,  # /out/cache starts as the previous step's cache
                    env={"ZIG_GLOBAL_CACHE_DIR": "/out/cache", "ZIG_LOCAL_CACHE_DIR": "/tmp/zig-local"},
                    cwd="/tmp",
                    limits=limits,
                )
                if not res.ok:
                    raise BuildFailed(f"zig cache warm-up failed ({' '.join(argv[:2])}, exit "
                                      f"{res.returncode}, limit {res.limit})", log=res.log)
                if seed is not None:
                    shutil.rmtree(seed)
                seed = step
            assert seed is not None
            os.replace(seed / "cache", staging / "cache")
            (staging / "cache" / ".wb-warm").write_text(stamp(zig))
            box.own_for_sandbox(staging / "cache")
            leftovers.replace_dir(staging / "cache", cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return time.monotonic() - start

