"""What of a toolkit folder the container tier copies in (``_toolkit_files``): its regular
files read through the core's containment walk — a link (to a host file or folder) is never
followed or copied, hidden folders are never entered, a FIFO is refused rather than read (it
would block), and the caps hold on the bytes as read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wbcore_container import tiers
from wbcore_runtime.contract.errors import InvalidArgs


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    tk = tmp_path / "tk"
    (tk / "bin").mkdir(parents=True)
    (tk / "manifest.org").write_text("#+TITLE: t\n")
    (tk / "bin" / "tool").write_bytes(b"\0asm")
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("HOSTSECRET")
    (tk / "leak.txt").symlink_to(host / "secret.txt")
    (tk / "hostdir").symlink_to(host, target_is_directory=True)
    (tk / ".git").mkdir()  # hidden: never entered, so a hard link in it is no matter
    (tk / ".git" / "a").write_text("x")
    os.link(tk / ".git" / "a", tk / ".git" / "b")
    return tk


def test_files_are_copied_links_and_hidden_folders_are_not(tk: Path) -> None:
    got = {d.dest: d.data for d in tiers._toolkit_files(tk)}
    assert got == {"/toolkit/bin/tool": b"\0asm", "/toolkit/manifest.org": b"#+TITLE: t\n"}
    assert all(d.path is None for d in tiers._toolkit_files(tk))  # bytes, not a path read later


def test_a_fifo_is_refused_not_read(tk: Path) -> None:
    os.mkfifo(tk / "bin" / "pipe")
    with pytest.raises(InvalidArgs, match="a FIFO"):
        tiers._toolkit_files(tk)


def test_the_caps_hold_on_the_bytes_read(tk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "TOOLKIT_BYTES", 12)
    (tk / "bin" / "big").write_bytes(b"x" * 13)
    with pytest.raises(InvalidArgs, match="is over"):
        tiers._toolkit_files(tk)
    (tk / "bin" / "big").unlink()
    monkeypatch.setattr(tiers, "TOOLKIT_FILES", 1)
    with pytest.raises(InvalidArgs, match="is over 1 files|more than 4 files"):  # files, or entries walked
        tiers._toolkit_files(tk)
