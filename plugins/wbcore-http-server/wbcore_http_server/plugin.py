"""Entry point of wbcore-http-server: the HTTP server engine (``wbcore_http_servers``). Imports nothing
heavy: uvicorn loads when ``wbx engine serve`` or ``wbx mcp serve --http`` first asks for a server."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import HttpServerService
from wbcore_runtime.plugins.manager import lazy


@hookimpl
def wbcore_http_servers() -> Iterator[HttpServerService]:
    yield HttpServerService(name="uvicorn", summary="ASGI on uvicorn, bounded: a request's deadline, "
                            "connection, header and stream caps per client and in all",
                            factory=lazy("wbcore_http_server.serve:service"))
