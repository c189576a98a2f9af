"""Fixtures for wbcore-fabric-local's tests (guests live in ``fabric_guests``)."""

from fabric_guests import register, rt  # noqa: F401
