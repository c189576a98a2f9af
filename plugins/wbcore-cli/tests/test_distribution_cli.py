"""``wbx toolkit install oci://...`` with no distribution client served says what to install."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract import distribution
from wbcore_runtime.contract.errors import NotFound
from wbcore_install import install
from wbcore_install import plugin as installer_plugin


def test_an_oci_install_with_no_client_says_what_to_install(make_runtime, wbx, wb_home) -> None:
    rt = make_runtime(plugins=[installer_plugin])  # the installer, and no OCI client
    with pytest.raises(NotFound, match="pip install wbcore-oci"):
        distribution.service(rt)
    r = wbx("toolkit", "install", "oci://registry.example/wb/tk:1", runtime=rt)
    assert r.exit_code != 0 and "pip install wbcore-oci" in r.stderr, r.stderr
    assert not (wb_home / "toolkits").exists() or not list((wb_home / "toolkits").iterdir())
    with pytest.raises(NotFound, match="none was given"):  # a caller that passes no client
        install.install(wb_home, "oci://registry.example/wb/tk:1")


def test_an_install_with_no_installer_says_what_to_install(make_runtime, wbx, wb_home, tmp_path) -> None:
    r = wbx("toolkit", "install", str(tmp_path), runtime=make_runtime(plugins=[]))
    assert r.exit_code == 127 and "pip install wbcore-install" in r.stderr, r.stderr
    assert not (wb_home / "toolkits").exists() and not (wb_home / "wbx.lock").exists()
