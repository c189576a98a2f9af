"""The install contract (``contract/installs.py``): the core reaches the toolkit installer only
through the service a plugin serves (``wbcore_installers``); with none served a caller is told
what to install. The installer itself (wbcore-install) is tested in ``plugins/wbcore-install/tests``."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract import installs
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.records import InstallerService


class Recorder:
    """A test installer: it only remembers what it was asked to replay."""

    def __init__(self) -> None:
        self.recovered: list[Path] = []

    def recover(self, home: Path) -> str | None:
        self.recovered.append(home)
        return None


def serving(*names: str, installer: object) -> object:
    class Serves:
        @hookimpl
        def wbcore_installers(self) -> list[InstallerService]:
            return [InstallerService(n, "a test installer", lambda _rt: installer) for n in names]

    return Serves()


def test_no_installer_served_names_what_to_install(make_runtime) -> None:
    rt = make_runtime(plugins=[])
    with pytest.raises(NotFound) as err:
        installs.service(rt)
    assert err.value.message == installs.NONE_INSTALLED
    assert installs.NONE_INSTALLED == "no toolkit installer is installed; pip install wbcore-install"


def test_the_one_served_installer_is_the_service_and_several_need_a_choice(make_runtime, monkeypatch) -> None:
    one = Recorder()
    rt = make_runtime(plugins=[serving("only", installer=one)])
    assert installs.service(rt) is one
    assert "only" in rt.installers.names()
    two = make_runtime(plugins=[serving("a", "b", installer=one)])
    with pytest.raises(InvalidArgs, match="several toolkit installers are installed .*WB_INSTALLER"):
        installs.service(two)
    assert installs.service(two, "b") is one


def test_a_source_pins_git_commits_and_oci_digests() -> None:
    git = installs.Source("git", "https://example.invalid/tk.git", "a" * 40)
    assert git.text() == "git+https://example.invalid/tk.git@" + "a" * 40
    oci = installs.Source("oci", "oci://registry.example/wb/tk:1")
    digest = "sha256:" + "b" * 64
    assert oci.text(digest) == f"oci://registry.example/wb/tk@{digest}" and oci.text() == oci.location
    entry = installs.LockEntry("tk", "1.0", "/src", "d", "first-party")
    assert entry.as_dict() == {"id": "tk", "version": "1.0", "source": "/src", "digest": "d",
                               "trust": "first-party"}
