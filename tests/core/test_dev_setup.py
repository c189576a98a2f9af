"""dev.py's set-up of system packages: apt-get as root (update once, then one quiet install),
never a hard failure; otherwise one message naming what is missing and the command that
installs it. apt-get here is a recording script on PATH (test support), never the real one."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dev(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # one package whose command is nowhere, one that is always there
    monkeypatch.setattr(mod, "SYSTEM_PACKAGES", [("wb-no-such-pkg", "cmd:wb-no-such-tool", "the test's lane"),
                                                 ("sh-pkg", "cmd:sh", "always there")])
    monkeypatch.setattr(mod, "NODE_PACKAGES", [])
    return mod


def fake_apt(tmp_path: Path, code: int) -> Path:
    """An apt-get that records its arguments and exits with ``code``."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    script = bin_ / "apt-get"
    script.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/apt.log\n'
                      f'echo "E: pretend failure" >&2\nexit {code}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_


def test_missing_packages_are_named_once_with_the_command_that_installs_them(dev, monkeypatch, capsys,
                                                                             tmp_path):
    monkeypatch.setenv("WB_SYSTEM_PACKAGES", "0")
    monkeypatch.setenv("PATH", f"{fake_apt(tmp_path, 0)}{os.pathsep}{os.environ['PATH']}")
    dev.system_packages()
    out = capsys.readouterr().out
    assert out.count("this machine lacks system packages") == 1
    assert "dev:   wb-no-such-pkg (no wb-no-such-tool on PATH): the test's lane" in out
    assert "apt-get install -y --no-install-recommends wb-no-such-pkg\n" in out and "sh-pkg" not in out
    assert not (tmp_path / "apt.log").exists()  # WB_SYSTEM_PACKAGES=0: apt-get never runs


def test_as_root_apt_updates_once_installs_quietly_and_a_failure_is_not_fatal(dev, monkeypatch, capsys,
                                                                              tmp_path):
    monkeypatch.delenv("WB_SYSTEM_PACKAGES", raising=False)
    monkeypatch.setenv("PATH", f"{fake_apt(tmp_path, 100)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    dev.system_packages()  # apt fails: no exception, the report follows
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1] == "install -y -qq --no-install-recommends wb-no-such-pkg"
    assert all(not c.startswith("update") for c in calls[1:])  # one update
    out = capsys.readouterr().out
    assert "apt-get update failed: E: pretend failure" in out
    assert "dev:   wb-no-such-pkg" in out and "to install them (Debian/Ubuntu): apt-get install" in out


def test_nothing_missing_says_nothing(dev, monkeypatch, capsys):
    monkeypatch.setattr(dev, "SYSTEM_PACKAGES", [("sh-pkg", "cmd:sh", "always there")])
    dev.system_packages()
    assert capsys.readouterr().out == ""
