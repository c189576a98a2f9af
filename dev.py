#!/usr/bin/env python3
"""The dev loop: one file, standard library only, so a fresh machine needs just Python.

    python3 dev.py setup       # set up .venv with the core and every plugin; warm the go build cache
    python3 dev.py demo        # set up .venv with the core and every plugin, run the demo
    python3 dev.py test        # set up, then run every distribution's tests
    python3 dev.py test -k x   # extra arguments go to pytest
    python3 dev.py isolated    # tests/core with only the core, then each plugin installed alone with it
    python3 dev.py bench       # the benchmarks in bench/
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("WB_VENV", ROOT / ".venv"))
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())


def _bin(env: Path, name: str) -> str:
    return str(env / ("Scripts" if os.name == "nt" else "bin") / name)


def _stamp() -> str:
    h = hashlib.sha256()
    for p in [ROOT / "pyproject.toml", *(p / "pyproject.toml" for p in PLUGINS)]:
        h.update(p.read_bytes())
    return h.hexdigest()


def ensure_venv(env: Path = VENV, dists: list[Path] | None = None, tag: str = "all") -> None:
    import fcntl

    env.parent.mkdir(parents=True, exist_ok=True)
    # One installer at a time per venv: parallel `dev.py` runs would corrupt it.
    with open(str(env) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ensure_venv(env, dists, tag)


def _pyproject(dist: Path) -> dict:
    import tomllib

    return tomllib.loads((dist / "pyproject.toml").read_text())["project"]


def _local_deps(dists: list[Path]) -> list[Path]:
    """``dists`` plus every plugin of this repository they depend on, transitively."""
    import re

    by_name = {_pyproject(p)["name"]: p for p in PLUGINS}
    out: list[Path] = []
    todo = list(dists)
    while todo:
        d = todo.pop()
        if d in out:
            continue
        out.append(d)
        for req in _pyproject(d).get("dependencies", []):
            name = re.split(r"[ <>=!~;\[]", req, maxsplit=1)[0]
            if name in by_name:
                todo.append(by_name[name])
    return sorted(out)


def _ensure_venv(env: Path, dists: list[Path] | None, tag: str) -> None:
    dists = PLUGINS if dists is None else _local_deps(dists)
    stamp_file = env / f".wb-stamp-{tag}"
    stamp = _stamp()
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        return
    _drop_stale_metadata()
    if not (env / "bin" / "python").exists():
        print(f"dev: creating {env}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(env)
    # editable_mode=compat puts each source folder on a .pth line instead of installing an
    # import-hook finder per distribution: start-up stays as fast as a regular install.
    args = [_bin(env, "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
            "--config-settings", "editable_mode=compat", "-e", f"{ROOT}[test]"]
    extras: list[str] = []
    for d in dists:
        # Plugins go in without "[test]": pip's resolver mis-orders local editables that
        # carry extras when one depends on another, so test extras are listed plainly.
        args += ["-e", str(d)]
        extras += _pyproject(d).get("optional-dependencies", {}).get("test", [])
    args += sorted(set(extras))
    print("dev: installing the core and " + (", ".join(d.name for d in dists) or "no plugins"), flush=True)
    subprocess.run(args, check=True)
    stamp_file.write_text(stamp)


def _drop_stale_metadata() -> None:
    """An editable install leaves ``<name>.egg-info`` in each source folder, and that folder is on
    sys.path: metadata of a distribution since renamed would still announce its old entry points."""
    import re
    import shutil

    for dist in [ROOT, *PLUGINS]:
        keep = re.sub(r"[-.]+", "_", _pyproject(dist)["name"]) + ".egg-info"
        for info in dist.glob("*.egg-info"):
            if info.name != keep:
                shutil.rmtree(info, ignore_errors=True)


def run(cmd: list[str], **kw: object) -> int:
    env = dict(os.environ)
    # No WB_HOME here: wbx finds ./.wb-home through ./wbx.toml (wbcore_runtime/home.py), so the demo,
    # the tests and a `wbx` typed later in any shell inside the project share one home.
    # One zig cache (wasi-libc, compiler_rt) shared by every WB_HOME the tests create.
    env.setdefault("WB_ZIG_CACHE", str(Path.home() / ".cache" / "wbcore" / "zig"))
    return subprocess.call(cmd, env=env, **kw)  # type: ignore[arg-type]


def warm(env: Path) -> None:
    """Fill the shared compiler caches once, before the tests time their builds."""
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_lane_zig"], capture_output=True)
    if probe.returncode == 0:
        print("dev: warming the zig cache (once per machine, about a minute)", flush=True)
        run([_bin(env, "python"), "-m", "wbcore_lane_zig", "warm"])
        fetch_jq(env)
    warm_go(env)
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_lane_js"], capture_output=True)
    if probe.returncode == 0:  # the ts lane's compiler from npm (once per machine; tests then need no network)
        fetch_typescript(env)
        fetch_svelte(env)


def warm_go(env: Path) -> None:
    """The go lane's build cache (the wasip1 standard library), once per machine: a new home's
    first go build starts from a checked copy of it (wbcore_lane_go.cache), not from nothing."""
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_lane_go"], capture_output=True)
    if probe.returncode == 0:
        print("dev: the go build cache (warmed once per machine: ~10-40 s the first time)", flush=True)
        run([_bin(env, "python"), "-m", "wbcore_lane_go", "warm"])


def fetch_jq(env: Path) -> None:
    """The jq built-in's pinned sources (the PyPI sdist jq==X): by `pip download` (pip's own
    index settings and CA apply), else through wbcore's fetcher; the plugin checks the pins."""
    import tempfile

    py = _bin(env, "python")
    if subprocess.run([py, "-c", "import sys, wbcore_lane_zig.builtins.jqsrc as j; sys.exit(j.sources() is None)"]).returncode == 0:
        return
    version = subprocess.run([py, "-c", "import wbcore_lane_zig.builtins.jqsrc as j; print(j.SDIST_VERSION)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run([py, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp, f"jq=={version}"],
                             capture_output=True, text=True)
        sdist = Path(tmp) / f"jq-{version}.tar.gz"
        if got.returncode == 0 and sdist.is_file():
            run([py, "-m", "wbcore_lane_zig", "fetch-jq", "--from", str(sdist)])
            return
        print(f"dev: pip download jq=={version} failed ({got.stderr.strip()[-200:]}); trying wbcore's fetcher", flush=True)
    run([py, "-m", "wbcore_lane_zig", "fetch-jq"])


def fetch_typescript(env: Path) -> None:
    """The ts lane's pinned compiler: by `npm pack` where npm is installed (npm's own
    registry settings and CA apply), else through wbcore's fetcher; the lane checks the pin."""
    import shutil
    import tempfile

    py = _bin(env, "python")
    if subprocess.run([py, "-c", "import sys, wbcore_lane_js.ts as t; sys.exit(t.compiler() is None)"]).returncode == 0:
        return
    npm = shutil.which("npm")
    if npm:
        with tempfile.TemporaryDirectory() as tmp:
            version = subprocess.run([py, "-c", "import wbcore_lane_js.ts as t; print(t.TYPESCRIPT_VERSION)"],
                                     capture_output=True, text=True, check=True).stdout.strip()
            packed = subprocess.run([npm, "pack", f"typescript@{version}", "--pack-destination", tmp],
                                    capture_output=True, text=True)
            tgz = Path(tmp) / f"typescript-{version}.tgz"
            if packed.returncode == 0 and tgz.is_file():
                run([py, "-m", "wbcore_lane_js", "fetch", "--from", str(tgz)])
                return
            print(f"dev: npm pack typescript@{version} failed ({packed.stderr.strip()[-200:]}); trying wbcore's fetcher", flush=True)
    run([py, "-m", "wbcore_lane_js", "fetch"])


def fetch_svelte(env: Path) -> None:
    """The svelte lane's pinned tarballs (svelte and the three packages its server runtime
    imports): by `npm pack` where npm is installed, else through wbcore's fetcher."""
    import shutil
    import tempfile

    py = _bin(env, "python")
    if subprocess.run([py, "-c", "import sys, wbcore_lane_js.svelte as s; sys.exit(bool(s.missing()))"]).returncode == 0:
        return
    npm = shutil.which("npm")
    if npm:
        with tempfile.TemporaryDirectory() as tmp:
            specs = subprocess.run([py, "-c", "import wbcore_lane_js.svelte as s; print(' '.join(f'{p.name}@{p.version}' for p in s.PACKAGES))"],
                                   capture_output=True, text=True, check=True).stdout.split()
            packed = subprocess.run([npm, "pack", *specs, "--pack-destination", tmp], capture_output=True, text=True)
            tgzs = sorted(Path(tmp).glob("*.tgz"))
            if packed.returncode == 0 and len(tgzs) == len(specs):
                run([py, "-m", "wbcore_lane_js", "fetch", "svelte", *(a for t in tgzs for a in ("--from", str(t)))])
                return
            print(f"dev: npm pack {' '.join(specs)} failed ({packed.stderr.strip()[-200:]}); trying wbcore's fetcher", flush=True)
    run([py, "-m", "wbcore_lane_js", "fetch", "svelte"])


def run_suites(env: Path, suites: list[Path], rest: list[str]) -> int:
    """One pytest run per distribution's tests (each keeps its own conftest and helper
    modules, as when installed alone), then one closing line with the totals."""
    import tempfile
    import xml.etree.ElementTree as ET

    totals = {"passed": 0, "failed": 0, "skipped": 0}
    worst = 0
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, suite in enumerate(suites):
            name = suite.parent.name if suite.parent not in (ROOT, ROOT / "tests") else "wbcore"
            print(f"dev: === {name}", flush=True)
            report = Path(tmp) / f"{i}.xml"
            code = run([_bin(env, "python"), "-m", "pytest", str(suite), f"--junit-xml={report}", *rest], cwd=suite.parent)
            if report.exists():
                for case in ET.parse(report).getroot().iter("testsuite"):
                    tests, fails = int(case.get("tests", 0)), int(case.get("failures", 0)) + int(case.get("errors", 0))
                    skips = int(case.get("skipped", 0))
                    totals["passed"] += tests - fails - skips
                    totals["failed"] += fails
                    totals["skipped"] += skips
            if code not in (0, 5):  # 5: nothing collected (e.g. every test deselected by -m)
                worst = worst or code
                bad.append(name)
    if bad:
        print(f"dev: failing suites: {', '.join(bad)}", flush=True)
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped", flush=True)
    return worst


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "demo"
    rest = argv[1:]
    if what == "setup":
        ensure_venv()
        warm_go(VENV)  # so that a fresh home's first go build takes seconds, not half a minute
        return 0
    if what == "demo":
        ensure_venv()
        return run([_bin(VENV, "wbx"), "demo", *rest], cwd=ROOT)
    if what == "test":
        ensure_venv()
        suites = [ROOT / "tests", *(p / "tests" for p in PLUGINS if (p / "tests").is_dir())]
        warm(VENV)
        return run_suites(VENV, suites, rest)
    if what == "isolated":
        # The core alone first: tests/core must pass with no plugin installed.
        env = ROOT / ".venvs" / "wbcore"
        ensure_venv(env, [], tag="core")
        print("dev: wbcore alone (tests/core)", flush=True)
        worst = run_suites(env, [ROOT / "tests" / "core"], ["-p", "no:cacheprovider", *rest])
        for plugin in PLUGINS:
            env = ROOT / ".venvs" / plugin.name
            ensure_venv(env, [plugin], tag=plugin.name)
            warm(env)
            print(f"dev: {plugin.name} alone with the core", flush=True)
            code = run_suites(env, [plugin / "tests"], ["-p", "no:cacheprovider", *rest])
            worst = worst or code  # every plugin's suite runs, whatever failed before it
        return worst
    if what == "bench":
        ensure_venv()
        return run([_bin(VENV, "python"), str(ROOT / "bench" / "run.py"), *rest], cwd=ROOT)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
