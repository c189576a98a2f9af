"""Crash safety: a SIGKILL at any step of an install or a build leaves the old state or the new one.

Each test runs ``wbx`` in a subprocess with ``WB_FAULT_AT=<step>`` (``wbcore_runtime/store/faults.py``), so
the process dies at that step as it would from ``kill -9``; then runs the next command, which
finishes or undoes what was left (``wbcore_runtime.store.leftovers.sweep_home``), and checks the home: the
user root and ``wbx.lock`` all old or all new, every registered artifact intact, and no
staging, temp or sandbox leftovers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from wbcore_runtime.store import leftovers
from wbcore_runtime.trust import signing, verdict as trust
from wbcore_runtime.store.artifacts import ArtifactStore
from wbcore_runtime.store.registry import CommandRegistry

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
INSTALL_STEPS = (["land:prepared", "land:journal"]
                 + [f"land:{what}-{i}" for i in range(3) for what in ("aside", "moved")]
                 + ["land:committed", "land:done"])
BUILD_STEPS = ["build:work", "write:.wasm:tmp", "write:.wasm:done", "write:.json:tmp", "write:.json:done",
               "write:.log:tmp", "write:.log:done"]


def wbx(home: Path, root: Path, *args: str, fault: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "WB_HOME": str(home),
           "WB_TOOLKITS_ROOT": str(root), "HOME": str(home.parent), "LANG": "C.UTF-8"}
    if fault:
        env["WB_FAULT_AT"] = fault
    return subprocess.run([sys.executable, "-m", "wbcore_runtime", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=home.parent)


def write_toolkits(base: Path, version: str) -> Path:
    src = base / f"src-{version}"
    for tid in ("alpha", "beta", "gamma"):
        d = src / tid
        (d / "skills").mkdir(parents=True)
        (d / "manifest.org").write_text(
            f"#+TITLE: {tid}\n#+TOOLKIT: {tid}\n#+VERSION: {version}\n#+STATUS: stable\n"
            f"#+TAGLINE: {tid} at {version}.\n\n* {tid} :toolkit:\n  :PROPERTIES:\n  :ID: {tid}\n  :END:\n")
        (d / "skills" / "overview.org").write_text(f"#+TITLE: {tid}\n\n{tid} {version}: " + "x" * 2000 + "\n")
    return src


def lock_of(home: Path) -> dict:
    return json.loads((home / "wbx.lock").read_text())["toolkits"]


def leftovers_in(home: Path) -> list[str]:
    found = [p.relative_to(home).as_posix() for p in home.rglob("*")
             if leftovers.TMP_MARK in p.name or p.name.startswith(("install-", "build-"))
             or p.name.endswith(".part")]
    if (home / ".install-journal.json").exists():
        found.append(".install-journal.json")
    found += [str(p) for p in Path(tempfile.gettempdir()).glob("wb-sbx-*")
              if leftovers.owner_alive(p.name, "wb-sbx-") is False]
    return found


def state(home: Path) -> str:
    """'1.0.0' or '2.0.0' when the root and the lock agree on one version for all three; else a
    description."""
    lock = lock_of(home)
    versions = {e["version"] for e in lock.values()}
    if set(lock) != {"alpha", "beta", "gamma"} or len(versions) != 1:
        return f"torn lock: {lock}"
    for tid, e in lock.items():
        folder = home / "toolkits" / tid
        if not folder.is_dir() or signing.content_digest(folder) != e["digest"]:
            return f"{tid}: folder does not match the lock"
    extra = sorted(p.name for p in (home / "toolkits").iterdir() if p.name not in lock)
    return f"extra folders {extra}" if extra else versions.pop()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A home with alpha, beta, gamma at 1.0.0, and the 2.0.0 sources that will replace them."""
    base = tmp_path_factory.mktemp("crash")
    v1, v2 = write_toolkits(base, "1.0.0"), write_toolkits(base, "2.0.0")
    root = base / "root"
    root.mkdir()
    home = base / "home-v1"
    r = wbx(home, root, "toolkit", "install", str(v1))
    assert r.returncode == 0, r.stderr
    assert state(home) == "1.0.0"
    return base, home, root, v2


@pytest.mark.parametrize("step", INSTALL_STEPS)
def test_a_kill_at_every_step_of_a_three_toolkit_install(installed, step):
    base, home_v1, root, v2 = installed
    home = base / f"home-{step.replace(':', '_')}"
    shutil.copytree(home_v1, home, symlinks=True)
    r = wbx(home, root, "toolkit", "install", "--force", str(v2), fault=step)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    after_kill = state(home)  # what a reader could see right now (before recovery) is reported, not asserted
    nxt = wbx(home, root, "toolkit", "list")
    assert nxt.returncode == 0, nxt.stderr
    got = state(home)
    expected = "2.0.0" if step in ("land:committed", "land:done") else "1.0.0"
    assert got == expected, (step, after_kill, got)
    assert leftovers_in(home) == []
    # and the home works on: installing again lands the new state cleanly
    r = wbx(home, root, "toolkit", "install", "--force", str(v2))
    assert r.returncode == 0, r.stderr
    assert state(home) == "2.0.0" and leftovers_in(home) == []


WAT_EXTRA = '  (global $crash_test_marker i32 (i32.const 42))\n)'


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash-build")
    root = base / "root"
    shutil.copytree(REPO / "toolkits" / "b64", root / "b64")
    home = base / "home-v1"
    r = wbx(home, root, "toolkit", "build", "b64")
    assert r.returncode == 0, r.stderr
    old = CommandRegistry(home / "registry.db").get("command", "b64").sha256
    wat = root / "b64" / "src" / "b64.wat"
    new_root = base / "root-v2"
    shutil.copytree(root, new_root)
    text = wat.read_text().rstrip()
    assert text.endswith(")")
    (new_root / "b64" / "src" / "b64.wat").write_text(text[:-1] + WAT_EXTRA + "\n")
    return base, home, new_root, old


def build_state(home: Path, old: str) -> str:
    entry = CommandRegistry(home / "registry.db").get("command", "b64")
    ArtifactStore(home / "artifacts").verify(entry.sha256)  # intact, whichever it is
    return "old" if entry.sha256 == old else "new"


@pytest.mark.parametrize("step", BUILD_STEPS)
def test_a_kill_at_every_step_of_a_build(built, step):
    base, home_v1, root_v2, old = built
    home = base / f"home-{step.replace(':', '_').replace('.', '')}"
    shutil.copytree(home_v1, home, symlinks=True)
    r = wbx(home, root_v2, "toolkit", "build", "b64", fault=step)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert wbx(home, root_v2, "toolkit", "list").returncode == 0
    # old until the registry commits the new entry; the build log is saved after it
    assert build_state(home, old) == ("new" if step.startswith("write:.log") else "old")
    assert leftovers_in(home) == []
    r = wbx(home, root_v2, "toolkit", "build", "b64")
    assert r.returncode == 0, r.stderr
    assert build_state(home, old) == "new"
    out = subprocess.run([sys.executable, "-m", "wbcore_runtime", "run", "b64"], input=b"hi",
                         capture_output=True, env={"PATH": os.environ["PATH"], "WB_HOME": str(home),
                                                   "WB_TOOLKITS_ROOT": str(root_v2)})
    assert out.stdout == b"aGk=\n", out.stderr


def test_ten_random_kills_leave_nothing_behind(installed, built):
    base, home_v1, root, v2 = installed
    bbase, bhome, broot, old = built
    home = base / "home-random"
    shutil.copytree(home_v1, home, symlinks=True)
    # the build sandbox's scratch root, owned by a process that is then killed
    # (the same helper wbcore-process uses)
    owner = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; from wbcore_runtime.store import leftovers; "
                              "print(leftovers.mkdtemp('wb-sbx-'), flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    scratch = Path(owner.stdout.readline().strip())
    live = leftovers.mkdtemp("wb-sbx-")  # this process's own: never swept while it lives
    rng = random.Random(11)
    sources = [v2, base / "src-1.0.0"]
    try:
        for n in range(10):
            env = {"PATH": os.environ["PATH"], "WB_HOME": str(home if n % 2 == 0 else bhome),
                   "WB_TOOLKITS_ROOT": str(root if n % 2 == 0 else broot), "LANG": "C.UTF-8"}
            args = ["toolkit", "install", "--force", str(sources[n // 2 % 2])] if n % 2 == 0 else \
                ["toolkit", "build", "b64", "--force"]
            p = subprocess.Popen([sys.executable, "-m", "wbcore_runtime", *args], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.2, 1.2))
            p.send_signal(signal.SIGKILL)
            p.wait()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert scratch.is_dir()
        for h, r in ((home, root), (bhome, broot)):
            nxt = wbx(h, r, "toolkit", "list")
            assert nxt.returncode == 0, nxt.stderr
            assert leftovers_in(h) == [], h
        assert state(home) in ("1.0.0", "2.0.0")
        assert build_state(bhome, old) in ("old", "new")
        assert not scratch.exists()
        assert live.is_dir()
    finally:
        owner.kill()
        shutil.rmtree(live, ignore_errors=True)


def test_a_full_home_disk_has_its_own_exit_code_and_a_run_still_works(tmp_path):
    mnt = tmp_path / "home"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        home = mnt / "wb"
        root = tmp_path / "root"
        shutil.copytree(REPO / "toolkits" / "b64", root / "b64")
        assert wbx(home, root, "toolkit", "build", "b64").returncode == 0
        env = {"PATH": os.environ["PATH"], "WB_HOME": str(home), "WB_TOOLKITS_ROOT": str(root)}
        warm = subprocess.run([sys.executable, "-m", "wbcore_runtime", "run", "b64"], input=b"hi",
                              capture_output=True, env=env)
        assert warm.stdout == b"aGk=\n", warm.stderr
        # fill the disk to the last block (unbuffered: no flush at close)
        with open(mnt / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass
        run = subprocess.run([sys.executable, "-m", "wbcore_runtime", "run", "b64"], input=b"hi",
                             capture_output=True, env=env)
        # a run that needs no write does not write
        assert run.returncode == 0 and run.stdout == b"aGk=\n", run.stderr
        src = write_toolkits(tmp_path, "1.0.0")
        r = wbx(home, root, "toolkit", "install", str(src))
        assert r.returncode == 74, (r.returncode, r.stderr)
        assert r.stderr.startswith("wbx: disk-full: no space left on the disk holding"), r.stderr
        assert "free some space" in r.stderr
        assert not (home / "toolkits" / "alpha").exists() and leftovers_in(home) == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_pure_compute_run_writes_nothing_to_the_home(tmp_path):
    home, root = tmp_path / "home", tmp_path / "root"
    shutil.copytree(REPO / "toolkits" / "b64", root / "b64")
    assert wbx(home, root, "toolkit", "build", "b64").returncode == 0
    env = {"PATH": os.environ["PATH"], "WB_HOME": str(home), "WB_TOOLKITS_ROOT": str(root)}

    def run() -> bytes:
        done = subprocess.run([sys.executable, "-m", "wbcore_runtime", "run", "b64"], input=b"hi",
                              capture_output=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def snapshot() -> dict[str, tuple[int, int]]:
        return {p.relative_to(home).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
                for p in [home, *home.rglob("*")]}

    # The first run may fill the compiled-module cache and the start-up caches (entry points,
    # manifests, content digests); those skip files changed in the last RACY_SECONDS, so let
    # the freshly copied toolkit settle first.
    time.sleep(trust.RACY_SECONDS)
    assert run() == b"aGk=\n"
    before = snapshot()
    assert run() == b"aGk=\n"
    assert snapshot() == before  # no -wal/-shm, no audit, no temp file: not even a folder's mtime moved
