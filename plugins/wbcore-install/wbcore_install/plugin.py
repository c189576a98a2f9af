"""Entry point of wbcore-install: the toolkit installer (``wbcore_installers``). Imports nothing
heavy: the installer loads when a command first asks for it (an install, or a journal to replay)."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import InstallerService
from wbcore_runtime.plugins.manager import lazy


@hookimpl
def wbcore_installers() -> Iterator[InstallerService]:
    yield InstallerService(name="install", summary="toolkits staged, verified, then landed with wbx.lock "
                           "(all or nothing, through a journal)",
                           factory=lazy("wbcore_install.service:service"))
