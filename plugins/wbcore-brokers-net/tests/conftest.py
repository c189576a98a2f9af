"""Fixtures for the net brokers' tests (the targets live in ``wbnet_targets``)."""

from wbnet_targets import dns, http_target, tcp_echo, tls_cert, tls_echo, udp_echo  # noqa: F401
