"""The HTTP server's socket and open-file limit (``listen``, ``raise_nofile``), and the service
itself: the one wbcore-http-server serves is what ``contract.http_server.service`` returns."""

from __future__ import annotations

import socket

import pytest

from wbcore_runtime.contract import http_server
from wbcore_runtime.contract.http_server import ServerLimits


def test_the_served_engine_is_uvicorn(make_runtime) -> None:
    rt = make_runtime(plugins=["http-server"])
    assert [r.name for r in rt.http_servers] == ["uvicorn"]
    served = http_server.service(rt)
    assert type(served).__module__ == "wbcore_http_server.serve"


def test_a_busy_or_refused_address_is_an_error_naming_it(make_runtime) -> None:
    from wbcore_runtime.contract.errors import InvalidArgs

    served = http_server.service(make_runtime(plugins=["http-server"]))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InvalidArgs, match=f"wbx thing: port {port} on 127.0.0.1 is already in use; "
                           "stop what listens there, or choose another port with --listen"):
            served.listen("127.0.0.1", port, what="wbx thing", option="--listen")
    with pytest.raises(InvalidArgs, match="cannot listen on 192.0.2.1:80.*--host"):
        served.listen("192.0.2.1", 80, what="wbx thing")  # an address this host does not have
    sock = served.listen("127.0.0.1", 0, what="wbx thing")  # listening, not only bound
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass
    finally:
        sock.close()


def test_the_open_file_limit_is_lifted_to_fit_the_connection_cap(make_runtime) -> None:
    import resource

    served = http_server.service(make_runtime(plugins=["http-server"]))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        want = min(300, hard) if hard != resource.RLIM_INFINITY else 300
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        got = served.raise_nofile(ServerLimits(max_connections=want - 16), spare=16)
        assert got == want == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert served.raise_nofile(ServerLimits(max_connections=10)) == want  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_uvicorns_own_bounds_come_from_the_limits() -> None:
    from wbcore_http_server import serve

    limits = ServerLimits(idle_s=7, graceful_s=3, max_connections=50, max_header_bytes=4096)
    config = serve.uvicorn_config(object(), host="127.0.0.1", port=1, limits=limits, log_level="warning")
    assert (config.timeout_keep_alive, config.timeout_graceful_shutdown, config.limit_concurrency,
            config.h11_max_incomplete_event_size) == (7, 3, 51, 4096)
    assert config.http.__name__ == "Bounded" and config.log_level == "warning"
