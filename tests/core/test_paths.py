"""wbcore_runtime.guard.paths: the one containment rule. One case per escape trick."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs, NotFound


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "toolkits" / "demo"
    (d / "skills").mkdir(parents=True)
    (d / "manifest.org").write_text("front door\n")
    (d / "skills" / "use.org").write_text("a recipe\n")
    (tmp_path / "secret.org").write_text("TOP SECRET\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "use.org").write_text("TOP SECRET\n")
    return d


def refused(root: Path, rel: str, match: str, **kw) -> paths.Refused:
    with pytest.raises(paths.Refused, match=match) as err:
        paths.read_file(root, rel, 1 << 20, **kw)
    return err.value


def test_plain_files_and_folders_resolve_to_their_real_path(tk: Path):
    assert paths.inside(tk, "skills/use.org") == Path(os.path.realpath(tk / "skills" / "use.org"))
    assert paths.inside(tk, "skills", expect="dir") == Path(os.path.realpath(tk / "skills"))
    assert paths.inside(tk, "./skills//use.org") == paths.inside(tk, "skills/use.org")
    assert paths.read_file(tk, "manifest.org", 100) == b"front door\n"
    with paths.open_file(tk, "skills/use.org") as fh:
        assert fh.read() == b"a recipe\n"


def test_the_message_is_file_colon_reason(tk: Path, tmp_path: Path):
    (tk / "manifest.org").unlink()
    os.symlink(tmp_path / "secret.org", tk / "manifest.org")
    err = refused(tk, "manifest.org", "outside")
    assert str(err) == f"{tk / 'manifest.org'}: symlink to a file outside the toolkit root"
    assert (err.path, err.reason) == (tk / "manifest.org", "symlink to a file outside the toolkit root")
    assert isinstance(err, InvalidArgs)  # an expected failure: one stderr line, exit 2


@pytest.mark.parametrize(("rel", "match"), [
    ("../secret.org", "'..' escapes the toolkit root"),
    ("skills/../../secret.org", "'..' escapes"),
    ("/etc/passwd", "an absolute path"),
    ("skills/use.org\x00", "NUL"),
])
def test_lexical_escapes_are_refused_before_any_lookup(tk: Path, rel: str, match: str):
    refused(tk, rel, match)


def test_a_symlinked_folder_outside_is_refused_wherever_it_sits(tk: Path, tmp_path: Path):
    os.symlink(tmp_path / "outside", tk / "docs")
    refused(tk, "docs/use.org", "docs: symlink to a folder outside the toolkit root")
    with pytest.raises(paths.Refused, match="symlink to a folder outside"):
        paths.inside(tk, "docs", expect="dir")


def test_relative_and_absolute_links_out_are_refused(tk: Path, tmp_path: Path):
    os.symlink("../../secret.org", tk / "rel.org")
    os.symlink(str(tmp_path / "secret.org"), tk / "abs.org")
    os.symlink("/etc/passwd", tk / "etc.org")
    for name in ("rel.org", "abs.org", "etc.org"):
        refused(tk, name, f"{name}: symlink to a file outside")


def test_a_chain_that_leaves_and_comes_back_is_refused(tk: Path, tmp_path: Path):
    # Each hop is checked, not only where the chain ends: the outside hop could change at any time.
    os.symlink(tk / "skills" / "use.org", tmp_path / "outside" / "back.org")
    os.symlink("../../outside/back.org", tk / "skills" / "round.org")
    refused(tk, "skills/round.org", "symlink to a file outside")


def test_links_that_stay_inside_are_followed(tk: Path):
    os.symlink("use.org", tk / "skills" / "alias.org")
    os.symlink("../manifest.org", tk / "skills" / "up.org")
    os.symlink(str(Path(os.path.realpath(tk)) / "skills"), tk / "recipes")  # absolute, but inside
    os.symlink(".", tk / "here")
    assert paths.read_file(tk, "skills/alias.org", 100) == b"a recipe\n"
    assert paths.read_file(tk, "skills/up.org", 100) == b"front door\n"
    assert paths.read_file(tk, "recipes/use.org", 100) == b"a recipe\n"
    assert paths.read_file(tk, "here/here/skills/use.org", 100) == b"a recipe\n"
    # ... but a link inside a sub-root may not climb out of that sub-root.
    skills = paths.Root.at(tk).folder("skills", "the skills folder")
    with pytest.raises(paths.Refused, match="up.org: symlink to a file outside the skills folder"):
        skills.read("up.org", 100)


def test_symlink_loops_end_in_a_refusal(tk: Path):
    os.symlink("b.org", tk / "a.org")
    os.symlink("a.org", tk / "b.org")
    refused(tk, "a.org", f"more than {paths.MAX_SYMLINK_HOPS} symlinks")


def test_a_hard_link_is_refused(tk: Path, tmp_path: Path):
    os.link(tmp_path / "secret.org", tk / "skills" / "leak.org")
    refused(tk, "skills/leak.org", "leak.org: has 2 hard links")
    with pytest.raises(paths.Refused, match="hard links"):
        paths.inside(tk, "skills/leak.org", expect="any")


def test_fifos_and_devices_are_not_files(tk: Path):
    os.mkfifo(tk / "skills" / "pipe.org")
    refused(tk, "skills/pipe.org", "a FIFO, not a regular file")  # refused before open: nothing blocks
    with pytest.raises(paths.Refused, match="a FIFO"):
        paths.inside(tk, "skills/pipe.org", expect="any")
    if os.geteuid() == 0:
        os.mknod(tk / "skills" / "null.org", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        refused(tk, "skills/null.org", "a device, not a regular file")


def test_kinds_are_checked(tk: Path):
    refused(tk, "skills", "a folder, not a regular file")
    with pytest.raises(paths.Refused, match="a file, not a folder"):
        paths.inside(tk, "manifest.org", expect="dir")
    refused(tk, "manifest.org/x", "manifest.org: not a folder")


def test_missing_is_not_found(tk: Path):
    with pytest.raises(NotFound, match="nope.org: does not exist"):
        paths.inside(tk, "skills/nope.org")
    os.symlink("gone.org", tk / "skills" / "dangling.org")
    with pytest.raises(NotFound):
        paths.inside(tk, "skills/dangling.org")


def test_reads_are_capped(tk: Path):
    (tk / "big.org").write_bytes(b"x" * 101)
    with pytest.raises(paths.Refused, match="big.org: 101 bytes is over the 100-byte cap"):
        paths.read_file(tk, "big.org", 100)
    assert len(paths.read_file(tk, "big.org", 101)) == 101


def test_a_symlink_swapped_in_after_the_check_is_not_followed(tk: Path, tmp_path: Path, monkeypatch):
    checked = paths.Root.resolve

    def swap_after_check(self, relative, expect="file"):
        out = checked(self, relative, expect)
        (tk / "skills" / "use.org").unlink()
        os.symlink(tmp_path / "secret.org", tk / "skills" / "use.org")
        return out

    monkeypatch.setattr(paths.Root, "resolve", swap_after_check)
    refused(tk, "skills/use.org", "cannot open")  # O_NOFOLLOW: ELOOP, never the secret


def test_a_file_replaced_after_the_check_is_refused(tk: Path, tmp_path: Path, monkeypatch):
    checked = paths.Root.resolve

    def replace_after_check(self, relative, expect="file"):
        out = checked(self, relative, expect)
        (tk / "other.org").write_text("not what was checked\n")
        os.replace(tk / "other.org", tk / "skills" / "use.org")
        return out

    monkeypatch.setattr(paths.Root, "resolve", replace_after_check)
    refused(tk, "skills/use.org", "replaced while it was being opened")


def test_discovery_reads_through_containment_without_extra_lookups(tk: Path, monkeypatch):
    """One lstat per component below the search root: 1,000 toolkits stay fast."""
    from wbcore_runtime.toolkit import discovery

    (tk / "manifest.org").write_text(
        "#+TITLE: Demo\n#+TOOLKIT: demo\n#+VERSION: 0.1.0\n#+STATUS: stable\n#+TAGLINE: demo\n\n"
        "* Demo :toolkit:\n"
    )
    calls: list[str] = []
    real_lstat = os.lstat

    def counting(path, *a, **k):
        calls.append(str(path))
        return real_lstat(path, *a, **k)

    monkeypatch.setattr(paths.os, "lstat", counting)
    root = tk.parent
    real_root = os.path.realpath(root)
    found = discovery.discover([root])
    assert list(found.toolkits) == ["demo"]
    below = [c for c in calls if c.startswith(real_root + os.sep)]
    assert below == [os.path.join(real_root, "demo", "manifest.org")]


def test_stays_inside_answers_for_links_whatever_they_name(tk: Path, tmp_path: Path):
    """The signature's link check asks the same rule (no second copy in signing.py)."""
    root = paths.Root.at(tk)
    os.symlink("use.org", tk / "skills" / "alias.org")
    os.symlink("gone.org", tk / "skills" / "dangling.org")
    os.symlink("../../secret.org", tk / "leak.org")
    os.link(tmp_path / "secret.org", tk / "hard.org")
    os.symlink("hard.org", tk / "to-hard.org")
    assert root.stays_inside("skills/alias.org") and root.stays_inside("skills/dangling.org")
    assert root.stays_inside("to-hard.org")  # where it points is inside; reading it is refused elsewhere
    assert not root.stays_inside("leak.org")
