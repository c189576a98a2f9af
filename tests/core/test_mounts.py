"""Host folders granted to one run (``wbcore_runtime.dispatch.mounts``: ``wbx shell --mount``,
``wbx run --mount``): the grammar, the one containment rule, and the reachability check every tier
that mounts a folder makes."""

from __future__ import annotations

import os

import pytest

from wbcore_runtime.dispatch import mounts


def test_mounts_are_parsed_and_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"HOST\[:GUEST\]"):
        mounts.parse_mount(f"{tmp_path}:/a:/b:ro")
    with pytest.raises(ValueError, match="does not exist"):
        mounts.parse_mount("nocolon")
    with pytest.raises(ValueError, match="does not exist"):
        mounts.parse_mount("/no/such/dir:/data")
    with pytest.raises(ValueError, match="ro or rw"):
        mounts.parse_mount(f"{tmp_path}:/data:rx")
    with pytest.raises(ValueError, match="normalised"):
        mounts.parse_mount(f"{tmp_path}:/data/../etc")
    with pytest.raises(ValueError, match="belongs to the sandbox"):
        mounts.parse_mount(f"{tmp_path}:/usr/bin")
    assert mounts.parse_mount(f"{tmp_path}:/data:rw") == mounts.Mount(str(tmp_path.resolve()), "/data", True)
    assert mounts.parse_mount(f"{tmp_path}:/data").rw is False
    # the guest path defaults to the folder's own real path; the mode may follow the host alone
    assert (mounts.parse_mount(f"{tmp_path}:rw")
            == mounts.Mount(str(tmp_path.resolve()), str(tmp_path.resolve()), True))
    assert (mounts.parse_mount(str(tmp_path))
            == mounts.Mount(str(tmp_path.resolve()), str(tmp_path.resolve()), False))


def test_mount_host_folders_are_granted_by_the_one_containment_rule(tmp_path) -> None:
    """paths.host_folder: links resolved once (the real folder is granted), no devices or
    kernel views, not the whole host, never the home or a folder around it."""
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "file").write_text("x")
    assert mounts.parse_mount(f"{tmp_path / 'link'}:/d", home=home).host == str(data.resolve())
    for spec, why in ((f"{home}:/d", "inside the wbcore home"),
                      (f"{home / 'keys'}:/d", "inside the wbcore home"),
                      (f"{tmp_path}:/d", "contains the wbcore home"), ("/:/d", "whole host"),
                      ("/dev:/d", "kernel's own view"), ("/proc/self:/d", "kernel's own view"),
                      (f"{tmp_path / 'file'}:/d", "not a folder"), ("/dev/null:/d", "a device")):
        with pytest.raises(ValueError, match=why):
            mounts.parse_mount(spec, home=home)
    # a link into the home is the home
    (tmp_path / "sneaky").symlink_to(home / "keys")
    with pytest.raises(ValueError, match="inside the wbcore home"):
        mounts.parse_mount(f"{tmp_path / 'sneaky'}:/d", home=home)
    with pytest.raises(Exception, match="given twice"):
        mounts.parse_mounts([f"{data}:/d", f"{data}:/d:rw"], home=home)


def test_unreachable_by_names_the_folder_an_unprivileged_uid_cannot_use() -> None:
    """The one check every tier that mounts a host folder makes (container, microvm)."""
    import shutil
    import stat
    import tempfile
    from pathlib import Path

    from wbcore_runtime.dispatch.mounts import unreachable_by

    if not os.stat("/tmp").st_mode & stat.S_IXOTH:
        pytest.skip("/tmp is not searchable by others here")
    other = 0x5B00FFFF  # owns nothing, in no group
    top = Path(tempfile.mkdtemp(dir="/tmp", prefix="wb-reach-"))
    try:
        inner = top / "data"
        inner.mkdir()
        top.chmod(0o755)
        inner.chmod(0o755)
        assert unreachable_by(str(inner), False, other) == ""
        assert "not writable by others" in unreachable_by(str(inner), True, other)
        top.chmod(0o700)
        assert (unreachable_by(str(inner), False, other)
                == f"{top} is not searchable by others (chmod o+x {top})")
        assert unreachable_by(str(inner), False, os.stat(top).st_uid) == ""  # its owner may
    finally:
        shutil.rmtree(top)
