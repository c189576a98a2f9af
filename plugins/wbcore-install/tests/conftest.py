"""Fixtures this plugin's tests share with the core's (wbcore-testing holds them once)."""

from wbcore_testing.toolkit_sources import src  # noqa: F401
