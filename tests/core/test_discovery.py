from __future__ import annotations

from pathlib import Path

from wbcore_runtime.toolkit import discovery
from wbcore_runtime.toolkit import roots as toolkit_roots
from wbcore_testing.fixtures import manifest_text, write_toolkit


def test_roots_order_and_rules(tmp_path: Path):
    cwd = tmp_path / "work"
    (cwd / "toolkits").mkdir(parents=True)
    (tmp_path / "toolkits").mkdir()
    home = tmp_path / "home"
    (home / "toolkits").mkdir(parents=True)
    extra1, extra2 = tmp_path / "e1", tmp_path / "e2"
    extra1.mkdir()
    env = {"WB_TOOLKIT_PATH": f"{extra1}:{tmp_path / 'missing'}:{extra2}"}
    # ./toolkits wins over ../toolkits; missing path entries are dropped.
    assert toolkit_roots.roots(env, cwd, home) == [cwd / "toolkits", home / "toolkits", extra1]
    # ../toolkits when ./toolkits is absent
    (cwd / "toolkits").rmdir()
    assert toolkit_roots.roots({}, cwd, home)[0] == tmp_path / "toolkits"


def test_wb_toolkits_root_only_if_it_exists(tmp_path: Path):
    cwd = tmp_path
    (cwd / "toolkits").mkdir()
    pinned = tmp_path / "pinned"
    home = tmp_path / "h"
    assert toolkit_roots.roots({"WB_TOOLKITS_ROOT": str(pinned)}, cwd, home)[0] == cwd / "toolkits"
    pinned.mkdir()
    assert toolkit_roots.roots({"WB_TOOLKITS_ROOT": str(pinned)}, cwd, home) == [pinned]


def test_malformed_manifest_reported_others_continue(tmp_path: Path):
    root = tmp_path / "root"
    write_toolkit(root, "good")
    write_toolkit(root, "bad", manifest=manifest_text("bad").replace("#+VERSION: 0.1.0", "#+VERSION: v1"))
    write_toolkit(root, "misnamed",
                  manifest=manifest_text("other-name").replace(":ID: other-name", ":ID: other-name"))
    (root / "not-a-toolkit").mkdir()
    (root / ".hidden").mkdir()
    found = discovery.discover([root])
    assert list(found.toolkits) == ["good"]
    problems = {e.path.parent.name: (e.line, e.field) for e in found.errors}
    assert problems == {"bad": (3, "VERSION"), "misnamed": (2, "TOOLKIT")}


def test_first_root_wins_and_later_copy_is_shadowed(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_toolkit(a, "same", tagline="from a")
    write_toolkit(b, "same", tagline="from b")
    found = discovery.discover([a, b])
    tk = found.toolkits["same"]
    assert tk.manifest.tagline == "from a"
    assert tk.shadows == (b / "same",)


def test_manifests_that_leave_the_toolkit_are_broken_entries(tmp_path: Path):
    import os

    root = tmp_path / "root"
    outside = tmp_path / "outside"
    write_toolkit(outside, "far")
    write_toolkit(root, "good")
    linked = write_toolkit(root, "linked")
    (linked / "manifest.org").unlink()
    os.symlink(outside / "far" / "manifest.org", linked / "manifest.org")
    hard = write_toolkit(root, "hard")
    (hard / "manifest.org").unlink()
    os.link(outside / "far" / "manifest.org", hard / "manifest.org")
    fifo = root / "fifo"
    (fifo / "skills").mkdir(parents=True)
    os.mkfifo(fifo / "manifest.org")  # refused before open: discovery never blocks on it
    os.symlink(outside / "far", root / "far")  # a whole toolkit folder linked in from outside
    found = discovery.discover([root])
    assert list(found.toolkits) == ["good"]
    problems = {e.path.parent.name: str(e) for e in found.errors}
    assert problems == {
        "linked": f"{root / 'linked' / 'manifest.org'}: symlink to a file outside the toolkit root",
        "hard": f"{root / 'hard' / 'manifest.org'}: has 2 hard links "
                "(another name may be outside the toolkit; copy the file instead)",
        "fifo": f"{root / 'fifo' / 'manifest.org'}: a FIFO, not a regular file",
        "far": f"{root / 'far' / 'manifest.org'}: the toolkit folder is a symlink "
               "to a folder outside the search root",
    }


def test_a_toolkit_folder_linked_within_the_search_root_is_read(tmp_path: Path):
    import os

    root = tmp_path / "root"
    write_toolkit(root / "store", "kit")
    os.symlink("store/kit", root / "kit")
    found = discovery.discover([root])
    assert "kit" in found.toolkits and found.toolkits["kit"].skills[0].slug == "overview"


def test_a_toolkit_folder_swapped_for_a_link_after_discovery_serves_nothing(tmp_path: Path):
    """A long-lived server keeps its discovery: skills are read from the search root down each time."""
    import os

    import pytest

    from wbcore_runtime.guard.paths import Refused

    root = tmp_path / "root"
    write_toolkit(root, "kit")
    write_toolkit(tmp_path / "outside", "kit", skills={"overview": "#+TITLE: TOP SECRET\n"})
    found = discovery.discover([root])
    tk = found.toolkits["kit"]
    os.rename(root / "kit", tmp_path / "moved")
    os.symlink(tmp_path / "outside" / "kit", root / "kit")
    with pytest.raises(Refused, match="kit: symlink to a folder outside the search root"):
        tk.skill_text("overview")
    assert tk.skills == [] and "outside the search root" in str(tk.skill_problems[0])
