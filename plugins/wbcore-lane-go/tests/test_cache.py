"""The go build cache: a home seeds only a checked copy of the machine cache the lane warmed,
and nothing a home's build does can reach the machine cache."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from wbcore_runtime.build import BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_lane_go import cache
from wbcore_lane_go import lane as golane

RID = "a" * 64  # a recipe id; the unit tests need no Go


def publish(tmp_path: Path, rid: str = RID) -> Path:
    """A machine cache as ``warm`` publishes one: Go's layout, copied by ``copy_tree``, marked."""
    raw = tmp_path / "raw"
    for sub, name, data in (("00", "00ab-d", b"compiled fmt"), ("00", "00cd-a", b"action 00ab"),
                            ("ff", "ffee-d", b"x" * 5000)):
        (raw / sub).mkdir(parents=True, exist_ok=True)
        (raw / sub / name).write_bytes(data)
    (raw / "README").write_text("This directory holds cached build artifacts from the Go build system.\n")
    machine = tmp_path / "machine" / "go"
    machine.parent.mkdir(mode=0o755)
    tree = cache.copy_tree(raw, machine, check=False)
    (machine / cache.MARKER).write_text(cache.marker_text(rid, tree))
    return machine


def files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}


def test_seeds_a_checked_copy_never_a_link(tmp_path):
    machine = publish(tmp_path)
    target = tmp_path / "home" / "cache" / "go-x"
    owned: list[Path] = []
    cache.seed(machine, target, RID, owned.append)
    assert cache.is_warm(target, RID)
    assert owned and owned[0].name == "cache"  # handed to the sandbox's user before it took its place
    mine, theirs = files(target), files(machine)
    assert mine.keys() == theirs.keys() and len(mine) == 5
    for rel, p in mine.items():
        if rel == cache.MARKER:
            continue
        assert p.read_bytes() == theirs[rel].read_bytes()
        st, mst = p.stat(), theirs[rel].stat()
        assert st.st_nlink == 1 and (st.st_dev, st.st_ino) != (mst.st_dev, mst.st_ino)
    (target / "00" / "00ab-d").write_bytes(b"poison")  # what a home does to its copy stays there
    assert (machine / "00" / "00ab-d").read_bytes() == b"compiled fmt"
    assert cache.is_trusted(machine, RID)
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")  and "seeding" in p.name]


def test_a_marker_of_another_recipe_is_not_seeded_from(tmp_path):
    machine = publish(tmp_path, rid="b" * 64)  # another Go version or warm-up program
    target = tmp_path / "home" / "go"
    with pytest.raises(cache.Untrusted, match="another Go version or warm-up recipe"):
        cache.seed(machine, target, RID, lambda p: None)
    assert not target.exists()


@pytest.mark.parametrize("marker",
                         [None, "", "recipe " + RID + "\n", cache.MARKER_HEAD + "\nrecipe " + RID + "\n"])
def test_a_cache_without_the_lanes_marker_is_not_seeded_from(tmp_path, marker):
    machine = publish(tmp_path)
    if marker is None:
        (machine / cache.MARKER).unlink()
    else:
        (machine / cache.MARKER).write_text(marker)
    with pytest.raises(cache.Untrusted, match="marker"):
        cache.seed(machine, tmp_path / "home" / "go", RID, lambda p: None)
    assert not cache.is_trusted(machine, RID)


@pytest.mark.parametrize("change", ["edit", "add", "remove"])
def test_a_cache_changed_after_it_was_warmed_is_refused(tmp_path, change):
    """A planted output behind the right marker: Go would trust it, the lane does not."""
    machine = publish(tmp_path)
    if change == "edit":
        (machine / "00" / "00ab-d").write_bytes(b"compiled evil")
    elif change == "add":
        (machine / "00" / "00ef-d").write_bytes(b"extra")
    else:
        (machine / "ff" / "ffee-d").unlink()
    target = tmp_path / "home" / "go"
    with pytest.raises(cache.Untrusted, match="does not match its marker"):
        cache.seed(machine, target, RID, lambda p: None)
    assert not target.exists() and list(target.parent.iterdir()) == []  # the staging copy is gone too
    assert not cache.is_trusted(machine, RID)


def test_links_and_shared_folders_are_refused(tmp_path):
    machine = publish(tmp_path)
    target = tmp_path / "home" / "go"
    os.symlink("/etc/passwd", machine / "00" / "00ff-d")
    with pytest.raises(cache.Untrusted, match="not a regular file"):
        cache.seed(machine, target, RID, lambda p: None)
    (machine / "00" / "00ff-d").unlink()
    os.link(machine / "00" / "00ab-d", tmp_path / "elsewhere")  # a second name someone else may write by
    with pytest.raises(cache.Untrusted, match="hard-linked"):
        cache.seed(machine, target, RID, lambda p: None)
    (tmp_path / "elsewhere").unlink()
    os.chmod(machine / "ff", 0o777)
    with pytest.raises(cache.Untrusted, match="writable by group or others"):
        cache.seed(machine, target, RID, lambda p: None)
    os.chmod(machine / "ff", 0o755)
    os.chmod(machine.parent, 0o777)  # another user could swap the whole cache
    with pytest.raises(cache.Untrusted, match="writable by group or others"):
        cache.seed(machine, target, RID, lambda p: None)
    os.chmod(machine.parent, 0o755)
    link = tmp_path / "link-to-machine"
    os.symlink(machine, link)
    with pytest.raises(cache.Untrusted, match="not a folder"):
        cache.seed(link, target, RID, lambda p: None)
    cache.seed(machine, target, RID, lambda p: None)  # put right, it seeds
    assert cache.is_warm(target, RID)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_cache_owned_by_another_user_is_refused(tmp_path):
    machine = publish(tmp_path)
    os.lchown(machine / "00" / "00ab-d", 12345, 12345)
    with pytest.raises(cache.Untrusted, match="belongs to uid 12345"):
        cache.seed(machine, tmp_path / "home" / "go", RID, lambda p: None)


def test_the_machine_cache_defaults_under_the_users_cache_folder(tmp_path):
    assert cache.machine_dir({}) == Path.home() / ".cache" / "wbcore" / "go"
    assert cache.machine_dir({"WB_GO_CACHE": str(tmp_path)}) == tmp_path
    with pytest.raises(cache.Untrusted, match="python -m wbcore_lane_go warm"):
        cache.trusted_source(tmp_path / "none", RID)


# --- with Go and the build sandbox ---------------------------------------------------------


@dataclass
class Recording:
    """The real build sandbox, recording what each run is given."""

    box: Any
    binds: list = field(default_factory=list)

    def run(self, argv, **kw):
        self.binds.append(list(kw.get("binds", ())))
        return self.box.run(argv, **kw)

    def own_for_sandbox(self, root: Path) -> None:
        self.box.own_for_sandbox(root)


def _toolkit(tmp_path: Path) -> Path:
    d = tmp_path / "gotool"
    (d / "src").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("gotool", exec="command",
                                                  extra={"CLI_BIN": "gotool", "BUILD_LANG": "go",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "gotool"}))
    (d / "src" / "go.mod").write_text("module example.com/gotool\n\ngo 1.21\n")
    (d / "src" / "main.go").write_text('package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() { '
                                       'fmt.Println(len(os.Args)) }\n')
    return d


def _build(lane: golane.GoLane, tk: Path, out: Path):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s), outdir=out))


def test_a_new_home_seeds_from_the_machine_cache_and_its_build_cannot_reach_it(tmp_path, go_cache,
                                                                               build_sandbox):
    go = golane.find()
    rid = cache.recipe(go.version)
    before = cache.copy_tree(go_cache, None, check=True)
    rec = Recording(build_sandbox)
    home = tmp_path / "home"
    lane = golane.GoLane(home=home, env={"WB_GO_CACHE": str(go_cache)}, sandbox=lambda: rec)
    out = _build(lane, _toolkit(tmp_path), tmp_path / "out")
    assert out.log.startswith(f"seeded the go build cache from {go_cache}")
    assert len(rec.binds) == 1  # no warm-up ran: the build itself only
    machine = go_cache.resolve()
    for bind in rec.binds[0]:
        src = Path(bind.src).resolve()
        assert src != machine and machine not in src.parents and src not in machine.parents
    [cache_bind] = [b for b in rec.binds[0] if b.dst == "/cache"]
    assert (cache_bind.overlay and not cache_bind.writable
            and Path(cache_bind.src) == cache.home_dir(go.version, home))
    assert cache.copy_tree(go_cache, None, check=True) == before and cache.is_trusted(go_cache, rid)
    again = _build(lane, _toolkit(tmp_path / "2"), tmp_path / "out2")
    assert "seeded" not in again.log  # the home's own cache from now on


@pytest.mark.slow
def test_a_poisoned_machine_cache_is_not_seeded_from(tmp_path, go_cache, build_sandbox):
    """The right marker over a changed output: the home warms its own cache instead."""
    poisoned = tmp_path / "machine" / "go"
    poisoned.parent.mkdir(mode=0o755)
    shutil.copytree(go_cache, poisoned)
    victim = next(p for p in sorted(poisoned.rglob("*-d")) if p.stat().st_size > 0)
    victim.write_bytes(b"\0" + victim.read_bytes()[1:])
    lane = golane.GoLane(home=tmp_path / "home", env={"WB_GO_CACHE": str(poisoned)},
                         sandbox=lambda: build_sandbox)
    out = _build(lane, _toolkit(tmp_path), tmp_path / "out")
    assert "not seeded (" in out.log and "does not match its marker" in out.log
    assert out.artifact.is_file()


def test_the_warm_command_checks_the_machine_cache_and_says_so(go_cache, monkeypatch, tmp_path, capsys):
    from wbcore_lane_go.__main__ import main

    monkeypatch.setenv("WB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WB_GO_CACHE", str(go_cache))
    assert main(["warm"]) == 0
    assert capsys.readouterr().out == f"go build cache {go_cache}: already warm\n"
    assert main(["cool"]) == 2 and "usage: python -m wbcore_lane_go warm" in capsys.readouterr().err
