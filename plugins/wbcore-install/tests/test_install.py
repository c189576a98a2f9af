"""``wbx toolkit install``: concurrent installs keep one lock; how sources parse."""

from __future__ import annotations

import json
import os

import pytest

from wbcore_install import install
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_testing.toolkit_sources import SEED0_B64


# --- --locked -------------------------------------------------------------------------


def test_parallel_installs_keep_one_consistent_lock(src, wb_home):
    from concurrent.futures import ThreadPoolExecutor

    env = {"WB_SIGNING_KEY": SEED0_B64}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: install.install(wb_home, str(src / p), env=env), ["tp", "fp"]))
    lock = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]
    assert sorted(lock) == ["fp", "tp"]


def test_plain_git_urls_are_git_sources():
    src = install.parse_source("https://example.invalid/tk.git@" + "a" * 40)
    assert (src.kind, src.location, src.commit) == ("git", "https://example.invalid/tk.git", "a" * 40)
    with pytest.raises(Exception, match="pin a commit"):
        install.parse_source("https://example.invalid/tk.git")


@pytest.mark.timeout(60)
def test_a_local_archive_swapped_for_a_link_to_an_endless_device_is_refused_not_copied(tmp_path) -> None:
    """Parsed as a regular archive, then swapped before the copy: a link to /dev/zero has size 0
    (under any size check) and never ends; the copy opens without following it and caps as it reads."""
    archive = tmp_path / "tk.tar.gz"
    archive.write_bytes(b"")
    source = install.parse_source(str(archive), None)
    assert source.kind == "archive"
    archive.unlink()
    archive.symlink_to("/dev/zero")
    (tmp_path / "work").mkdir()
    with pytest.raises(InvalidArgs, match="cannot open"):
        install.fetch(source, tmp_path / "work")
    assert not (tmp_path / "work" / "tree").exists()


@pytest.mark.timeout(60)
def test_a_local_archive_swapped_for_a_fifo_is_refused_without_blocking(tmp_path) -> None:
    archive = tmp_path / "tk.tar.gz"
    archive.write_bytes(b"")
    source = install.parse_source(str(archive), None)
    archive.unlink()
    os.mkfifo(archive)  # no writer: a blocking open or read would never return
    (tmp_path / "work").mkdir()
    with pytest.raises(InvalidArgs, match="not a regular file"):
        install.fetch(source, tmp_path / "work")


def test_a_folder_file_hard_linked_to_a_file_outside_is_not_installed(src, wb_home, tmp_path) -> None:
    """A folder install copies what the folder holds: a name that is another name of a file
    elsewhere (a hard link) is refused, as the build snapshot and every toolkit read refuse it."""
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    os.link(secret, src / "fp" / "notes.txt")
    with pytest.raises(InvalidArgs, match="hard links"):
        install.install(wb_home, str(src / "fp"))
    assert not (wb_home / "toolkits" / "fp").exists()


@pytest.mark.timeout(60)
def test_a_folder_file_swapped_for_a_link_to_a_fifo_is_refused_without_blocking(src, tmp_path,
                                                                                monkeypatch) -> None:
    """Looked at as a regular file, then swapped for a link to a FIFO before it is opened (a
    writer acting right after the look): the copy never follows it (an open would block on
    the FIFO forever, holding the home's lock)."""
    target = src / "fp" / "data.bin"
    target.write_bytes(b"data")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    real_stat = os.stat

    def stat_then_swapped(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if kwargs.get("follow_symlinks") is False and os.fspath(path).endswith("data.bin") \
                and not os.path.islink(target):
            target.unlink()
            target.symlink_to(fifo)
        return result

    monkeypatch.setattr(os, "stat", stat_then_swapped)
    source = install.parse_source(str(src / "fp"), None)
    (tmp_path / "work").mkdir()
    with pytest.raises(InvalidArgs, match="data.bin"):
        install.fetch(source, tmp_path / "work")


def test_an_install_behind_a_held_home_lock_ends_at_its_bound(src, wb_home, monkeypatch):
    """A wbx suspended with Ctrl-Z mid-install keeps the home's install lock: the next install
    waits a bounded time and says what holds it, never for ever."""
    import fcntl

    from wbcore_install import journal
    from wbcore_runtime.contract.errors import Timeout
    from wbcore_testing.loopback import ends_within

    monkeypatch.setattr(journal, "LOCK_WAIT_S", 0.5)
    wb_home.mkdir(parents=True, exist_ok=True)
    fd = os.open(wb_home / "wbx.lock.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the suspended install
        env = {"WB_SIGNING_KEY": SEED0_B64}
        err, _ = ends_within(lambda: install.install(wb_home, str(src / "fp"), env=env), 10,
                             "an install behind a held lock")
        assert isinstance(err, Timeout) and "still held by another process" in str(err), err
    finally:
        os.close(fd)
    assert not (wb_home / "toolkits" / "fp").exists()
