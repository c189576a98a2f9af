"""``wbx run --tier microvm --mount``: a host folder granted to one posix call travels over
virtio-9p into a micro-VM restored for the call — the shipped git-history toolkit's recipes
against a real repository, with git from the host's Debian packages in the guest image.

Slow: the first run builds the image and boots the mount-slot snapshot cold once (kept under
``$WB_MICROVM_CACHE``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from wbcore_microvm import image, tiers

from wbcore_runtime.build import builder
from wbcore_runtime.contract.errors import InvalidArgs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not tiers._probe_tools()[0],
                                 reason=f"microvm unavailable: {tiers._probe_tools()[1]}"),
              pytest.mark.skipif(shutil.which("git") is None or not image.host_clis(),
                                 reason="git (and ldd) on the host: the guest image copies it")]

CACHE = Path(os.environ.get("WB_MICROVM_CACHE") or Path.home() / ".cache" / "wbcore" / "microvm")
SHIPPED = Path(__file__).resolve().parents[3] / "toolkits" / "git-history"


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WB_MICROVM_CACHE", str(CACHE))


@pytest.fixture
def repo(history_repo: Path) -> Path:
    """wbcore-testing's repository (three commits by two authors, readable by QEMU's uid)."""
    return history_repo


@pytest.fixture
def rt(make_runtime, toolkit_root):
    shutil.copytree(SHIPPED, toolkit_root / "git-history")
    runtime = make_runtime()
    runtime.discover(refresh=True)
    builder.build(runtime, "git-history")
    return runtime


def test_git_history_recipes_run_in_a_micro_vm_against_a_mounted_repository(rt, repo) -> None:
    log = rt.call("git", ["--no-pager", "-c", "color.ui=never", "-C", "/repo", "log", "-n", "50",
                          "--format=%H%x09%an%x09%s"], tier="microvm", mounts=[f"{repo}:/repo"], timeout=60)
    assert log.exit_code == 0, log.stderr.decode()
    assert log.usage.isolation in ("kvm", "tcg") and log.usage.tier == "microvm"
    rows = [ln.split("\t") for ln in log.stdout.decode().splitlines()]
    assert [(r[1], r[2]) for r in rows] == [("Ada", "third: another file"), ("Bob", "second: a line by Ada"),
                                            ("Ada", "first: add notes")]
    blame = rt.call("git", ["--no-pager", "-C", "/repo", "blame", "--porcelain", "--", "notes.txt"],
                    tier="microvm", mounts=[f"{repo}:/repo"], timeout=60)
    assert blame.exit_code == 0 and b"author Ada" in blame.stdout and b"author Bob" in blame.stdout
    # read-only: the guest cannot write into the host's folder
    tag = rt.call("git", ["-C", "/repo", "tag", "v1"], tier="microvm", mounts=[f"{repo}:/repo"], timeout=60)
    assert tag.exit_code != 0 and not (repo / ".git" / "refs" / "tags" / "v1").exists()


def test_too_many_mounts_are_refused_before_any_vm_starts(rt, repo, tmp_path) -> None:
    with pytest.raises(InvalidArgs, match="at most 4"):
        rt.call("git", ["status"], tier="microvm", mounts=[f"{repo}:/r{i}" for i in range(5)])
