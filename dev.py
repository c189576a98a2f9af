#!/usr/bin/env python3
"""The dev loop: one file, standard library only, so a fresh machine needs just Python and git.

    python3 dev.py demo             # set up, then build and run every shipped toolkit (offline)
    python3 dev.py test             # set up, then everything CI runs: the default suite, the microvm
                                    # image, the slow suite, each plugin installed alone with the core
    python3 dev.py test --quick     # set up, then the default suite only (-m "not slow")
    python3 dev.py test -k x        # set up, then one pass over every suite; the arguments go to pytest
    python3 dev.py test --quick -k x
    python3 dev.py setup            # set up only
    python3 dev.py lint             # set up, then the lint stage alone (ruff, then mypy)
    python3 dev.py isolated         # tests/core with only the core, then each plugin installed alone with it
    python3 dev.py tox              # write tox.ini (the same environments, for tox) from the pyprojects
    python3 dev.py bench            # the benchmarks in bench/

Set-up: the system packages the product uses (apt-get, when run as root on Debian/Ubuntu;
otherwise one message naming what is missing and the command that installs it), .venv with
the core and every plugin, and the per-machine compiler caches (zig, go, the ts and svelte
compilers, jq's sources). Settings: WB_SYSTEM_PACKAGES=0 never runs apt-get (it only reports
what is missing); WB_VENV=<path> uses that environment instead of ./.venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("WB_VENV", ROOT / ".venv"))
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
# Test support (the wbcore pytest plugin): every environment that runs a suite has it.
TESTING = ROOT / "plugins" / "wbcore-testing"


def _bin(env: Path, name: str) -> str:
    return str(env / ("Scripts" if os.name == "nt" else "bin") / name)


def _stamp() -> str:
    h = hashlib.sha256()
    for p in [ROOT / "pyproject.toml", *(p / "pyproject.toml" for p in PLUGINS)]:
        h.update(p.read_bytes())
    return h.hexdigest()


# The system packages the product uses (Debian/Ubuntu names): what needs each, and how dev.py
# tells it is there — a command on PATH ("cmd:<name>"), or for a library dpkg's record ("pkg").
# Every one is optional: a lane or tier whose toolchain is missing says so and the rest runs.
SYSTEM_PACKAGES: list[tuple[str, str, str]] = [
    ("git", "cmd:git", "git+ sources and installs"),
    # rustc + the wasm32-wasi std: the rust lane.
    ("rustc", "cmd:rustc", "the rust lane"),
    ("cargo", "cmd:cargo", "the rust lane's crate: sources"),
    ("libstd-rust-dev-wasm32", "pkg", "the rust lane's wasm32-wasi standard library"),
    # lld-14: rust-lld, the wasm linker Debian's rustc names (only "suggested" by rustc).
    ("lld-14", "cmd:wasm-ld-14", "rust-lld, the rust lane's wasm linker"),
    # clang-22 + wasm-ld + wasm32 compiler-rt + wasi-libc: the c lane (prebuilt sysroot, no zig
    # warm-up; without them the c lane uses zig cc).
    ("clang-22", "cmd:clang-22", "the c lane's compiler (else zig cc, slower to warm)"),
    ("lld-22", "cmd:wasm-ld-22", "the c lane's wasm linker"),
    ("libclang-rt-22-dev-wasm32", "pkg", "the c lane's wasm32 compiler-rt"),
    ("wasi-libc", "pkg", "the c lane's prebuilt WASI sysroot"),
    # bubblewrap: the container tier.
    ("bubblewrap", "cmd:bwrap", "the container tier"),
    # imagemagick: a real Debian CLI the posix tests run.
    ("imagemagick", "cmd:convert", "a real CLI the posix-shape tests run"),
    # docker-registry: the OCI distribution registry the OCI publish/install tests start on loopback.
    ("docker-registry", "cmd:docker-registry", "the OCI registry the publish tests start on loopback"),
    # tmux: the terminal `wbx shell` is tested in (send-keys / capture-pane).
    ("tmux", "cmd:tmux", "the terminal wbx shell is tested in"),
    # qemu-system-x86 + busybox-static: the microvm tier (its guest kernel is Debian's
    # linux-image-amd64, fetched by `apt-get download` when the image is first built).
    ("qemu-system-x86", "cmd:qemu-system-x86_64", "the microvm tier"),
    ("busybox-static", "pkg", "the microvm tier's guest userland (a static busybox)"),
    # chromium: the real headless browser the engine console's slow tests drive (Playwright is
    # pointed at /usr/bin/chromium; no browser is downloaded).
    ("chromium", "cmd:chromium", "the browser the engine console's slow tests drive"),
]
# node + npm (npx runs the official MCP Inspector CLI in the slow suite; npm packs the pinned ts
# and svelte compilers): Debian's only where the machine has none of its own (a node from
# elsewhere makes Debian's nodejs/npm uninstallable, "held broken packages").
NODE_PACKAGES: list[tuple[str, str, str]] = [
    ("nodejs", "cmd:node", "npx runs the MCP Inspector in the slow suite"),
    ("npm", "cmd:npx", "packs the ts and svelte compilers; runs the MCP Inspector"),
]
APT_UPDATE_TIMEOUT = 300.0
APT_INSTALL_TIMEOUT = 1800.0


def _dpkg_has(package: str) -> bool | None:
    """dpkg's record of ``package`` (None where there is no dpkg: then nothing is claimed)."""
    import shutil

    if not shutil.which("dpkg-query"):
        return None
    got = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return got.returncode == 0 and got.stdout.strip().endswith(" installed")


def missing_system_packages() -> list[tuple[str, str, str]]:
    """The packages of :data:`SYSTEM_PACKAGES` (and node's, when no npx) this machine lacks."""
    import shutil

    wanted = SYSTEM_PACKAGES + (NODE_PACKAGES if not shutil.which("npx") else [])
    out = []
    for package, probe, why in wanted:
        kind, _, name = probe.partition(":")
        there = shutil.which(name) is not None if kind == "cmd" else _dpkg_has(package) is not False
        if not there:
            out.append((package, probe, why))
    return out


def _apt(args: list[str], timeout: float) -> str | None:
    """One quiet apt-get step: None when it worked, else why not (a line)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        got = subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"apt-get {args[0]} took longer than {timeout:.0f} s"
    if got.returncode != 0:
        tail = (got.stderr.strip() or got.stdout.strip()).splitlines()[-1:] or [f"exit {got.returncode}"]
        return f"apt-get {args[0]} failed: {tail[0][:200]}"
    return None


def system_packages() -> None:
    """Install the missing system packages with apt-get when this runs as root on a machine that
    has it (unless WB_SYSTEM_PACKAGES=0); otherwise — or for what apt could not install — say once
    what is missing and the command that installs it. Never fails: the rest goes on without."""
    import shutil

    missing = missing_system_packages()
    if not missing:
        return
    can_apt = (os.environ.get("WB_SYSTEM_PACKAGES", "1") != "0" and shutil.which("apt-get") is not None
               and hasattr(os, "geteuid") and os.geteuid() == 0)
    if can_apt:
        names = [m[0] for m in missing]
        print(f"dev: installing system packages with apt-get: {' '.join(names)}", flush=True)
        problem = _apt(["update", "-qq"], APT_UPDATE_TIMEOUT)
        if problem:
            print(f"dev: {problem}; installing from the package lists already on this machine", flush=True)
        problem = _apt(["install", "-y", "-qq", "--no-install-recommends", *names], APT_INSTALL_TIMEOUT)
        if problem:  # one unavailable package fails the whole line: retry them one by one
            for name in names:
                _apt(["install", "-y", "-qq", "--no-install-recommends", name], APT_INSTALL_TIMEOUT)
        missing = missing_system_packages()
        if not missing:
            return
    print("dev: this machine lacks system packages the product can use; what needs them will say it is "
          "unavailable, and everything else runs:", flush=True)
    for package, probe, why in missing:
        kind, _, name = probe.partition(":")
        print(f"dev:   {package}" + (f" (no {name} on PATH)" if kind == "cmd" else "") + f": {why}",
              flush=True)
    sudo = "" if hasattr(os, "geteuid") and os.geteuid() == 0 else "sudo "
    print(f"dev: to install them (Debian/Ubuntu): {sudo}apt-get install -y --no-install-recommends "
          + " ".join(m[0] for m in missing), flush=True)


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
    """``dists`` plus every plugin of this repository they depend on (their test extras
    included: wbcore-testing), transitively."""
    import re

    by_name = {_pyproject(p)["name"]: p for p in PLUGINS}
    out: list[Path] = []
    todo = list(dists)
    while todo:
        d = todo.pop()
        if d in out:
            continue
        out.append(d)
        project = _pyproject(d)
        for req in [*project.get("dependencies", []),
                    *project.get("optional-dependencies", {}).get("test", [])]:
            name = re.split(r"[ <>=!~;\[]", req, maxsplit=1)[0]
            if name in by_name:
                todo.append(by_name[name])
    return sorted(out)


def _ensure_venv(env: Path, dists: list[Path] | None, tag: str) -> None:
    dists, extras = _requirements(PLUGINS if dists is None else dists)
    stamp_file = env / f".wb-stamp-{tag}"
    stamp = _stamp()
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        return
    _drop_stale_metadata()
    if not (env / "bin" / "python").exists():
        print(f"dev: creating {env}", flush=True)
        try:
            venv.EnvBuilder(with_pip=True, clear=False).create(env)
        except subprocess.CalledProcessError:  # Debian/Ubuntu ship venv's pip bootstrap apart from Python
            print("dev: this Python cannot create an environment with pip (ensurepip failed); on "
                  "Debian/Ubuntu: apt-get install "
                  f"python3-venv (or python{sys.version_info[0]}.{sys.version_info[1]}-venv)",
                  flush=True)
            raise
    # editable_mode=compat puts each source folder on a .pth line instead of installing an
    # import-hook finder per distribution: start-up stays as fast as a regular install.
    args = [_bin(env, "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
            "--config-settings", "editable_mode=compat", "-e", f"{ROOT}[test]"]
    # Plugins go in without "[test]": pip's resolver mis-orders local editables that carry
    # extras when one depends on another, so test extras are listed plainly (one naming a
    # distribution of this repository, wbcore-testing, is met by its -e).
    for d in dists:
        args += ["-e", str(d)]
    args += extras
    print("dev: installing the core and " + (", ".join(d.name for d in dists) or "no plugins"), flush=True)
    # llama-cpp-python (wbcore-llm-local) is built from source here. ggml's default build targets the
    # build machine's CPU, and a virtual CPU can advertise instructions (AMX, AVX-512) it then faults
    # on: the local model server died of SIGILL on its first completion. A portable build (AVX2 at
    # most) runs on any x86-64 host a developer or CI uses; CMAKE_ARGS set by the caller wins.
    pip_env = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", "-DGGML_NATIVE=OFF")}
    subprocess.run(args, check=True, env=pip_env)
    stamp_file.write_text(stamp)


def _requirements(dists: list[Path]) -> tuple[list[Path], list[str]]:
    """What an environment of ``dists`` installs, as ``_ensure_venv`` does: the plugins of this
    repository they need (transitively, test extras included), then the other test requirements."""
    dists = _local_deps([*dists, TESTING])
    local = {_pyproject(p)["name"] for p in PLUGINS}
    extras = {e for d in dists for e in _pyproject(d).get("optional-dependencies", {}).get("test", [])}
    return dists, sorted(e for e in extras if re.split(r"[ <>=!~;\[]", e, maxsplit=1)[0] not in local)


def tox_ini() -> str:
    """tox.ini, made from the distributions' pyproject.toml files (``python3 dev.py tox`` writes it;
    tests/core/test_tox_ini.py checks it is current): the same environments ``dev.py isolated``
    builds, for whoever runs tox."""
    names = [p.name for p in PLUGINS]
    out = ["# Made by `python3 dev.py tox` from each distribution's pyproject.toml: edit those, not this.",
           "# One env per plugin distribution, installed alone with the core (plus the plugins of this",
           "# repository it depends on, test extras included), as `python3 dev.py isolated` does without",
           "# tox, and one all-in env (`python3 dev.py test` is the all-in run).",
           "[tox]", f"envlist = {', '.join(['all', 'core', *names])}", "skip_missing_interpreters = true", "",
           "[testenv]", "package = skip", "setenv =", "    WB_HOME = {envtmpdir}/wb-home", "",
           "[testenv:core]", "description = the core alone: tests/core needs no plugin", "deps =",
           "    -e .[test]", "    -e plugins/wbcore-testing",
           "commands = pytest {toxinidir}/tests/core -p no:cacheprovider {posargs}", "",
           "[testenv:all]", "description = the core and every plugin", "deps =", "    -e .[test]"]
    dists, extras = _requirements(PLUGINS)
    out += [f"    -e plugins/{d.name}" for d in dists] + [f"    {e}" for e in extras]
    out += ["commands =", "    pytest {toxinidir}/tests {posargs}"]
    out += [f"    pytest {{toxinidir}}/plugins/{n}/tests {{posargs}}" for n in names
            if (ROOT / "plugins" / n / "tests").is_dir()]
    for plugin in PLUGINS:
        dists, extras = _requirements([plugin])
        out += ["", f"[testenv:{plugin.name}]", f"description = {plugin.name} installed alone with the core",
                f"changedir = {{toxinidir}}/plugins/{plugin.name}", "deps =", "    -e {toxinidir}[test]"]
        out += [f"    -e {{toxinidir}}/plugins/{d.name}" for d in dists] + [f"    {e}" for e in extras]
        out += ["commands = pytest tests -p no:cacheprovider {posargs}"]
    return "\n".join(out) + "\n"


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
    # No WB_HOME here: wbx finds ./.wb-home through ./wbx.toml (wbcore_runtime/store/home.py), so the demo,
    # the tests and a `wbx` typed later in any shell inside the project share one home.
    # One zig cache (wasi-libc, compiler_rt) shared by every WB_HOME the tests create.
    env.setdefault("WB_ZIG_CACHE", str(Path.home() / ".cache" / "wbcore" / "zig"))
    return subprocess.call(cmd, env=env, **kw)  # type: ignore[arg-type]


def warm(env: Path) -> None:
    """Fill the shared compiler caches once, before the tests time their builds."""
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_lane_zig"], capture_output=True)
    if probe.returncode == 0:
        print("dev: the zig cache (warmed once per machine: about a minute the first time)", flush=True)
        run([_bin(env, "python"), "-m", "wbcore_lane_zig", "warm"])
        fetch_jq(env)
    warm_go(env)
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_lane_js"], capture_output=True)
    # the ts lane's compiler from npm (once per machine; tests then need no network)
    if probe.returncode == 0:
        fetch_typescript(env)
        fetch_svelte(env)
    fetch_wasi_tools(env)


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
    if subprocess.run([py, "-c", "import sys, wbcore_lane_zig.builtins.jqsrc as j; "
                                 "sys.exit(j.sources() is None)"]).returncode == 0:
        return
    version = subprocess.run([py, "-c", "import wbcore_lane_zig.builtins.jqsrc as j; print(j.SDIST_VERSION)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        # --no-binary jq, not :all: (which also builds the sdist's build requirements, Cython
        # among them, from source: minutes of compiling for a file we only unpack).
        got = subprocess.run([py, "-m", "pip", "download", "--no-deps", "--no-binary", "jq", "-d", tmp,
                              f"jq=={version}"],
                             capture_output=True, text=True)
        sdist = Path(tmp) / f"jq-{version}.tar.gz"
        if got.returncode == 0 and sdist.is_file():
            run([py, "-m", "wbcore_lane_zig", "fetch-jq", "--from", str(sdist)])
            return
        print(f"dev: pip download jq=={version} failed ({got.stderr.strip()[-200:]}); trying "
              "wbcore's fetcher",
              flush=True)
    run([py, "-m", "wbcore_lane_zig", "fetch-jq"])


def fetch_wasi_tools(env: Path) -> None:
    """The third-party WASI programs the tests run as shipped (tests/integration/wasi_tools.py:
    svg-flatten from the svg-flatten-wasi wheel), pinned: by `pip download` (pip's own index
    settings and CA apply); a failure is a note, and the tests that need them say how to fetch."""
    import tempfile

    py = _bin(env, "python")
    helper = Path(__file__).resolve().parent / "tests" / "integration" / "wasi_tools.py"
    if subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {str(helper.parent)!r}); "
                                 "import wasi_tools as w; sys.exit(w.cached(w.SVG_FLATTEN) is None)"],
                      capture_output=True).returncode == 0:
        return
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run([py, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", tmp,
                              "svg-flatten-wasi==3.1.9"], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("svg_flatten_wasi-*.whl"))
        if got.returncode != 0 or not wheels:
            print(f"dev: note: pip download svg-flatten-wasi failed ({got.stderr.strip()[-200:]}); the tests "
                  "that run it fetch it themselves or skip", flush=True)
            return
        if run([py, str(helper), "--from", str(wheels[0])]) != 0:
            print("dev: note: the svg-flatten wheel was not the pinned one; the tests that run it skip",
                  flush=True)


def fetch_typescript(env: Path) -> None:
    """The ts lane's pinned compiler: by `npm pack` where npm is installed (npm's own
    registry settings and CA apply), else through wbcore's fetcher; the lane checks the pin."""
    import shutil
    import tempfile

    py = _bin(env, "python")
    if subprocess.run([py, "-c", "import sys, wbcore_lane_js.ts as t; "
                                 "sys.exit(t.compiler() is None)"]).returncode == 0:
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
            print(f"dev: npm pack typescript@{version} failed ({packed.stderr.strip()[-200:]}); trying "
                  "wbcore's fetcher", flush=True)
    run([py, "-m", "wbcore_lane_js", "fetch"])


def fetch_svelte(env: Path) -> None:
    """The svelte lane's pinned tarballs (svelte and the three packages its server runtime
    imports): by `npm pack` where npm is installed, else through wbcore's fetcher."""
    import shutil
    import tempfile

    py = _bin(env, "python")
    if subprocess.run([py, "-c", "import sys, wbcore_lane_js.svelte as s; "
                                 "sys.exit(bool(s.missing()))"]).returncode == 0:
        return
    npm = shutil.which("npm")
    if npm:
        with tempfile.TemporaryDirectory() as tmp:
            specs = subprocess.run([py, "-c", "import wbcore_lane_js.svelte as s; print(' '.join("
                                              "f'{p.name}@{p.version}' for p in s.PACKAGES))"],
                                   capture_output=True, text=True, check=True).stdout.split()
            packed = subprocess.run([npm, "pack", *specs, "--pack-destination", tmp], capture_output=True,
                                    text=True)
            tgzs = sorted(Path(tmp).glob("*.tgz"))
            if packed.returncode == 0 and len(tgzs) == len(specs):
                run([py, "-m", "wbcore_lane_js", "fetch", "svelte",
                     *(a for t in tgzs for a in ("--from", str(t)))])
                return
            print(f"dev: npm pack {' '.join(specs)} failed ({packed.stderr.strip()[-200:]}); trying wbcore's "
                  "fetcher", flush=True)
    run([py, "-m", "wbcore_lane_js", "fetch", "svelte"])


FAILURES: list[str] = []  # every failed test of this run, named again just before the closing line


def run_suites(env: Path, suites: list[Path], rest: list[str], totals: dict[str, int]) -> int:
    """One pytest run per distribution's tests (each keeps its own conftest and helper
    modules, as when installed alone), its counts added to ``totals``."""
    import tempfile
    import xml.etree.ElementTree as ET

    worst = 0
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, suite in enumerate(suites):
            name = suite.parent.name if suite.parent not in (ROOT, ROOT / "tests") else "wbcore"
            print(f"dev: === {name}", flush=True)
            report = Path(tmp) / f"{i}.xml"
            code = run([_bin(env, "python"), "-m", "pytest", str(suite), f"--junit-xml={report}", *rest],
                       cwd=suite.parent)
            if report.exists():
                for case in ET.parse(report).getroot().iter("testsuite"):
                    tests, fails = (int(case.get("tests", 0)),
                                    int(case.get("failures", 0)) + int(case.get("errors", 0)))
                    skips = int(case.get("skipped", 0))
                    totals["passed"] += tests - fails - skips
                    totals["failed"] += fails
                    totals["skipped"] += skips
                for case in ET.parse(report).getroot().iter("testcase"):
                    for bad_case in (*case.iter("failure"), *case.iter("error")):
                        where = f"{case.get('classname', '')}::{case.get('name', '')}"
                        why = (bad_case.get("message") or "").splitlines()[:1]
                        FAILURES.append(f"{name}: {where} - {why[0][:300] if why else '?'}")
            if code not in (0, 5):  # 5: nothing collected (e.g. every test deselected by -m)
                worst = worst or code
                bad.append(name)
    if bad:
        print(f"dev: failing suites: {', '.join(bad)}", flush=True)
    return worst


def closing(totals: dict[str, int]) -> None:
    """The last line of a test run (CI reads it): the totals over every suite that ran, after
    the name and first message line of every failed test (a CI log may keep only its tail)."""
    for failure in FAILURES:
        print(f"dev: FAILED {failure}", flush=True)
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped", flush=True)


def lint(env: Path = VENV) -> int:
    """The lint stage, first in a test run: ``ruff check`` over the core, every plugin, the
    tests, the benchmarks and this file ([tool.ruff.lint]), then ``mypy`` over the core and
    every plugin's import package ([tool.mypy]; the contract modules strict). Both run even
    when the first fails; the worst exit wins."""
    print("dev: === lint: ruff (pyproject.toml [tool.ruff.lint])", flush=True)
    worst = run([_bin(env, "ruff"), "check", "wbcore_runtime", "plugins", "tests", "bench", "dev.py"],
                cwd=ROOT)
    print("dev: === lint: mypy (pyproject.toml [tool.mypy])", flush=True)
    code = run([_bin(env, "mypy")], cwd=ROOT)
    print("dev: === lint: the benchmarks against the project's API (mypy, drift only)", flush=True)
    drift = bench_drift(env)
    if worst or code or drift:
        failed = (n for n, c in (("ruff", worst), ("mypy", code), ("bench", drift)) if c)
        print("dev: lint failed: " + ", ".join(failed), flush=True)
    return worst or code or drift


def bench_drift(env: Path = VENV) -> int:
    """The mypy findings in bench/ that mean a benchmark no longer fits the code it measures: a
    call whose arguments changed (bench/tiers.py once built an os_process pool the old way and
    nothing noticed), a name or a module attribute that is gone. The rest of bench/ drives
    untyped engine bindings (wasmtime, ctypes) and is not held to mypy."""
    got = subprocess.run([_bin(env, "mypy"), "bench"], cwd=ROOT, capture_output=True, text=True)
    found = [line for line in got.stdout.splitlines()
             if re.search(r": error: .*\[(call-arg|name-defined)\]$", line)
             or re.search(r': error: Module "[^"]+" has no attribute .*\[attr-defined\]$', line)]
    for line in found:
        print(line, flush=True)
    if got.returncode not in (0, 1):  # 1: findings (judged above); anything else: mypy could not check
        print(got.stdout + got.stderr, flush=True)
        return got.returncode
    return 1 if found else 0


def setup(env: Path = VENV) -> None:
    """What `demo` and `test` need before they run: system packages, the environment, the caches."""
    system_packages()
    ensure_venv(env)
    warm(env)


def prepare_microvm(env: Path) -> None:
    """The microvm tier's image and snapshot, built once (one cold boot) and shared by every test
    home of the slow suite; its steps and times are printed."""
    probe = subprocess.run([_bin(env, "python"), "-c", "import wbcore_microvm"], capture_output=True)
    if probe.returncode != 0:
        return
    if run([_bin(env, "python"), "-m", "wbcore_microvm", "prepare"]) != 0:
        print("dev: the microvm tier is unavailable here; its tests will skip, saying why", flush=True)


def isolated(rest: list[str], totals: dict[str, int]) -> int:
    """tests/core with only the core installed, then each plugin's tests with only it and the core."""
    env = ROOT / ".venvs" / "wbcore"
    ensure_venv(env, [], tag="core")
    print("dev: wbcore alone (tests/core)", flush=True)
    worst = run_suites(env, [ROOT / "tests" / "core"], ["-p", "no:cacheprovider", *rest], totals)
    for plugin in PLUGINS:
        env = ROOT / ".venvs" / plugin.name
        ensure_venv(env, [plugin], tag=plugin.name)
        warm(env)
        print(f"dev: {plugin.name} alone with the core", flush=True)
        code = run_suites(env, [plugin / "tests"], ["-p", "no:cacheprovider", *rest], totals)
        worst = worst or code  # every plugin's suite runs, whatever failed before it
    return worst


def test(argv: list[str]) -> int:
    """``dev.py test``: everything CI runs, stage by stage with the time each ended; with
    ``--quick`` the default suite only; with other arguments one pass over every suite, the
    arguments going to pytest. The closing line is the totals over every stage."""
    import time

    start = time.monotonic()

    def stamp(what: str) -> None:
        print(f"dev: {what} at {time.monotonic() - start:.0f} s", flush=True)

    quick = "--quick" in argv
    rest = [a for a in argv if a != "--quick"]
    setup()
    stamp("set-up")
    suites = [ROOT / "tests", *(p / "tests" for p in PLUGINS if (p / "tests").is_dir())]
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    linted = 0
    if quick or not rest:
        linted = lint()
        stamp("lint" + (" FAILED" if linted else ""))
    if quick or rest:
        worst = run_suites(VENV, suites, ["-m", "not slow", *rest] if quick else rest, totals) or linted
        stamp("default suite" if quick else "every suite")
        closing(totals)
        return worst
    quiet = ["-q", "-p", "no:cacheprovider"]
    worst = run_suites(VENV, suites, [*quiet, "-m", "not slow"], totals) or linted
    stamp("default suite")
    # From here on (as CI did): one microvm image and snapshot for every test home, built once.
    os.environ.setdefault("WB_MICROVM_CACHE", str(Path.home() / ".cache" / "wbcore" / "microvm"))
    prepare_microvm(VENV)
    stamp("microvm image + cold boot + snapshot")
    worst = run_suites(VENV, suites, [*quiet, "-m", "slow"], totals) or worst
    stamp("slow suite")
    worst = isolated(["-q", "-m", "not slow"], totals) or worst
    stamp("isolated plugin suites")
    closing(totals)
    return worst


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "demo"
    rest = argv[1:]
    if what in ("-h", "--help", "help") or "--help" in rest[:1] or "-h" in rest[:1]:
        print(__doc__)
        return 0
    if what == "setup":
        setup()
        return 0
    if what == "lint":
        setup()
        return lint(VENV)
    if what == "demo":
        setup()
        return run([_bin(VENV, "wbx"), "demo", *rest], cwd=ROOT)
    if what == "test":
        return test(rest)
    if what == "isolated":
        totals = {"passed": 0, "failed": 0, "skipped": 0}
        worst = isolated(rest, totals)
        closing(totals)
        return worst
    if what == "tox":
        (ROOT / "tox.ini").write_text(tox_ini())
        print("dev: wrote tox.ini")
        return 0
    if what == "bench":
        ensure_venv()
        return run([_bin(VENV, "python"), str(ROOT / "bench" / "run.py"), *rest], cwd=ROOT)
    print(f"dev: unknown command {what!r}; the commands are setup, demo, test, lint, isolated, tox, bench")
    print(__doc__)
    return 2


if __name__ == "__main__":
    if sys.version_info < (3, 11):
        print(f"dev: wbcore needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable})")
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1:]))
    except subprocess.CalledProcessError as exc:  # a step that must work did not: one line, no traceback
        cmd = " ".join(map(str, exc.cmd)) if isinstance(exc.cmd, list) else str(exc.cmd)
        print(f"dev: this step failed (exit {exc.returncode}): {cmd[:300]}", file=sys.stderr)
        sys.exit(exc.returncode or 1)
    except KeyboardInterrupt:
        print("dev: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # the reader went away (dev.py … | head)
        sys.exit(0)
