"""The HTTP server contract (``wbcore_runtime.contract.http_server``): the engine that serves
``wbx engine serve`` and ``wbx mcp serve --http`` is a service a plugin serves
(``wbcore_http_servers``, wbcore-http-server); with none served, the caller is told what to
install, and a served one is what ``service`` returns. ``ServerLimits`` is the core's record."""

from __future__ import annotations

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract import http_server
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.records import RECORD_KINDS, HttpServerService


class _Served:
    def listen(self, host: str, port: int, *, what: str, option: str = "--port") -> object:
        raise AssertionError("not called")


def _serving(*names: str) -> object:
    class ServesHttp:
        @hookimpl
        def wbcore_http_servers(self) -> list[HttpServerService]:
            return [HttpServerService(n, "a test server", lambda _rt: _Served()) for n in names]

    return ServesHttp()


def test_none_served_names_the_distribution_to_install(make_runtime) -> None:
    with pytest.raises(NotFound, match="no HTTP server is installed; pip install wbcore-http-server"):
        http_server.service(make_runtime(plugins=[]))


def test_the_served_engine_is_chosen_like_every_service(make_runtime, monkeypatch) -> None:
    assert RECORD_KINDS["wbcore_http_servers"] is HttpServerService
    assert isinstance(http_server.service(make_runtime(plugins=[_serving("uvicorn")])), _Served)
    rt = make_runtime(plugins=[_serving("a", "b")])
    with pytest.raises(InvalidArgs, match="several HTTP servers.*WB_HTTP_SERVER"):
        http_server.service(rt)
    assert isinstance(http_server.service(rt, "b"), _Served)
    monkeypatch.setenv("WB_HTTP_SERVER", "a")
    assert isinstance(http_server.service(make_runtime(plugins=[_serving("a", "b")])), _Served)


def test_server_limits_are_a_frozen_record_with_the_documented_defaults() -> None:
    limits = http_server.ServerLimits()
    assert (limits.request_deadline_s, limits.idle_s, limits.max_connections,
            limits.max_connections_per_client, limits.max_streams, limits.max_streams_per_client,
            limits.max_header_bytes, limits.graceful_s) == (30.0, 15, 1024, 256, 512, 128, 32 * 1024, 10)
    with pytest.raises(AttributeError):
        limits.idle_s = 1  # type: ignore[misc]
