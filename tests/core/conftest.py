"""Fixtures the core's tests share with wbcore-cli's (wbcore-testing holds them once)."""

from wbcore_testing.loopback import http_port, https_port, pki, serve  # noqa: F401
from wbcore_testing.toolkit_sources import src  # noqa: F401
