"""Fixtures for the exec brokers' tests (guests live in ``wbexec_guests``)."""

from wbexec_guests import register_guest  # noqa: F401
