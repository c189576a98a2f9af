"""The installer as ``contract.installs.Installer``: :mod:`wbcore_install.install`'s operations and
:func:`wbcore_install.journal.recover`, which hold no state of the runtime's (each takes the home)."""

from __future__ import annotations

from typing import Any

from wbcore_runtime.contract.installs import Installer
from wbcore_install import install as _install
from wbcore_install import journal


class ModuleInstaller:
    """``contract.installs.Installer`` over this distribution's modules."""

    parse_source = staticmethod(_install.parse_source)
    fetch = staticmethod(_install.fetch)
    install = staticmethod(_install.install)
    preview = staticmethod(_install.preview)
    install_locked = staticmethod(_install.install_locked)
    uninstall = staticmethod(_install.uninstall)
    recover = staticmethod(journal.recover)


def service(_runtime: Any) -> Installer:
    """``InstallerService.factory`` (typed as the Protocol, so mypy checks the class against it)."""
    return ModuleInstaller()
