"""Fixtures the CLI's tests share with the core's (wbcore-testing holds them once)."""

from wbcore_testing.loopback import https_port, pki, serve  # noqa: F401
from wbcore_testing.toolkit_sources import src  # noqa: F401
