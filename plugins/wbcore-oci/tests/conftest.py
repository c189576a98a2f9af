"""Fixtures this plugin's tests share with the integration suite's (wbcore-testing holds them once)."""

from wbcore_testing.oci_images import allowed_registry  # noqa: F401
