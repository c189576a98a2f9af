"""Fixtures for wbcore-ray's tests: a runtime, WAT guests, and a real 2-node Ray cluster."""

from ray_fixtures import register, rt, two_nodes  # noqa: F401
