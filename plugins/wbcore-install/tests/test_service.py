"""wbcore-install serves the installer (``wbcore_installers``): a caller reaches it only through
``contract.installs.service(runtime)``, and it replays a journal a killed install left."""

from __future__ import annotations

import json

from wbcore_install import journal, service
from wbcore_install.lockfile import LOCKFILE, read_lock
from wbcore_runtime.contract import installs
from wbcore_runtime.store import leftovers
from wbcore_testing.fixtures import write_toolkit


def test_the_installed_plugin_serves_the_installer(make_runtime, tmp_path, wb_home) -> None:
    rt = make_runtime()  # the installed distributions' entry points
    assert "install" in rt.installers.names()
    installer: installs.Installer = installs.service(rt)
    assert isinstance(installer, service.ModuleInstaller)
    src = write_toolkit(tmp_path / "src", "tk", caps="vfs")
    done = installer.install(wb_home, str(src))
    assert [(d.entry.id, d.unchanged) for d in done] == [("tk", False)]
    assert isinstance(done[0], installs.Installed) and set(read_lock(wb_home / LOCKFILE)) == {"tk"}
    [change] = installer.preview(wb_home, str(src))
    assert isinstance(change, installs.Change) and change.action == "unchanged"
    entry = installer.uninstall(wb_home, "tk")
    assert entry is not None and entry.id == "tk" and read_lock(wb_home / LOCKFILE) == {}
    assert not (wb_home / "toolkits" / "tk").exists()


def test_recover_through_the_service_rolls_back_an_uncommitted_landing(make_runtime, tmp_path,
                                                                       wb_home) -> None:
    installer = installs.service(make_runtime())
    assert installer.recover(wb_home) is None  # no journal: nothing to do, nothing written
    (wb_home / "toolkits" / "tk").mkdir(parents=True)
    (wb_home / "toolkits" / "tk" / "old").write_text("old")
    stage = wb_home / leftovers.STAGING / "install-x"
    stage.mkdir(parents=True)
    (stage / "new").mkdir()
    lock_tmp = wb_home / "wbx.lock.tmp"
    lock_tmp.write_text("{}")
    # killed after moving the old folder aside, before the lockfile's commit point
    (wb_home / "toolkits" / "tk").rename(stage / "old-tk")
    (wb_home / leftovers.JOURNAL).write_text(json.dumps({
        "format": 1, "owner": "x", "lock_tmp": "wbx.lock.tmp",
        "moves": [{"id": "tk", "new": ".staging/install-x/new", "target": "toolkits/tk",
                   "aside": ".staging/install-x/old-tk"}]}))
    assert installer.recover(wb_home) == "rolled back"
    assert (wb_home / "toolkits" / "tk" / "old").read_text() == "old"
    assert not (wb_home / leftovers.JOURNAL).exists() and not lock_tmp.exists()
    assert journal.recover(wb_home) is None
