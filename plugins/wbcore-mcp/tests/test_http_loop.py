"""The streamable HTTP server keeps its event loop free: what a request makes it wait on (the
registry, which another process may hold locked while it writes) runs off the loop, so one
client's call never stalls every other client."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")
pytest.importorskip("wasmtime")

from wbcore_runtime.contract import http_server  # noqa: E402
from wbcore_runtime.contract.http_server import ServerLimits  # noqa: E402

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


@pytest.fixture
def mcp_url(demo_runtime) -> Iterator[tuple[str, Any]]:
    from wbcore_mcp.server import build_server, http_app

    http = http_server.service(demo_runtime)
    sock = http.listen("127.0.0.1", 0, what="the test server")
    port = sock.getsockname()[1]
    server = build_server(demo_runtime, warm=True)
    server.wb_provider.tools()  # listed before serving, as a warm server has it
    limits = ServerLimits()
    app = http_app(server, http=http, host="127.0.0.1", limits=limits)
    ready = threading.Event()
    uv = http.server(app, host="127.0.0.1", port=port, limits=limits, ready=ready, log_level="warning",
                     lifespan="on")
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{port}", demo_runtime
    uv.should_exit = True
    thread.join(timeout=10)


def _session(c: httpx.Client, url: str) -> dict[str, str]:
    r = c.post(url + "/mcp", json=INIT, headers=ACCEPT)
    assert r.status_code == 200, r.text
    headers = {**ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    r = c.post(url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202, r.text
    return headers


def test_a_call_waiting_on_a_locked_registry_does_not_stall_other_clients(mcp_url) -> None:
    """A ``tools/call`` naming a tool the list lacks looks at the registry (a toolkit may
    have been built meanwhile); while another process holds the registry locked (a build
    committing) that read waits. It waited on the event loop: every other client of the
    server — a request, a stream's heartbeat — waited with it."""
    url, runtime = mcp_url
    with httpx.Client(timeout=30) as c:
        headers = _session(c, url)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "nokit.nothing", "arguments": {}}}
        holder = sqlite3.connect(runtime.registry.path, timeout=5, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # as a writer in another process holds it
        answered: list[str] = []

        def slow_call() -> None:
            with httpx.Client(timeout=30) as other:
                answered.append(other.post(url + "/mcp", json=call, headers=headers).text)

        caller = threading.Thread(target=slow_call)
        try:
            caller.start()
            time.sleep(0.5)  # the call is waiting on the registry
            t0 = time.monotonic()
            r = c.get(url + "/elsewhere")
            waited = time.monotonic() - t0
            assert r.status_code == 404
            assert waited < 1.0, f"another client waited {waited:.1f} s behind a registry read"
        finally:
            time.sleep(0.5)
            holder.execute("ROLLBACK")
            holder.close()
            caller.join(timeout=20)
        assert answered and "Unknown tool: nokit.nothing" in answered[0], answered
