"""wbcore-mcp with the core and the tool provider alone (wbcore-act): its tool list comes from
the runtime's provider; without one it says which distribution to install."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")


def test_tools_are_listed_through_the_tool_provider_alone(make_runtime, wbx) -> None:
    rt = make_runtime(plugins=["mcp", "act"])  # no other plugin: the provider is wbcore-act's
    r = wbx("mcp", "tools", runtime=rt)
    assert r.exit_code == 0 and r.stdout.startswith("no tools: register a command")
    r = wbx("mcp", "tools", "--json", runtime=rt)
    assert (r.exit_code, json.loads(r.stdout)) == (0, [])


def test_the_server_builds_over_the_tool_provider_alone(make_runtime) -> None:
    from wbcore_mcp.server import SERVER_NAME, build_server

    server = build_server(make_runtime(plugins=["mcp", "act"]), search_tool=True)
    assert server.name == SERVER_NAME


def test_without_a_tool_provider_the_error_names_wbcore_act(make_runtime, wbx) -> None:
    from wbcore_runtime.contract.errors import NotFound
    from wbcore_mcp.server import build_server

    rt = make_runtime(plugins=["mcp"])
    with pytest.raises(NotFound, match="pip install wbcore-act"):
        build_server(rt)
    r = wbx("mcp", "tools", runtime=rt)
    assert r.exit_code != 0 and "pip install wbcore-act" in r.stdout + r.stderr


def test_http_without_an_http_server_names_wbcore_http_server(make_runtime, wbx) -> None:
    """``--http`` is served by the HTTP server service (wbcore-http-server): with none served,
    the error says what to install, before any socket or banner."""
    from wbcore_runtime.contract.errors import NotFound
    from wbcore_mcp.server import serve_http

    rt = make_runtime(plugins=["mcp", "act"])
    with pytest.raises(NotFound, match="no HTTP server is installed; pip install wbcore-http-server"):
        serve_http(rt, port=0)
    r = wbx("mcp", "serve", "--http", "--port", "0", runtime=rt)
    assert r.exit_code == 127 and "pip install wbcore-http-server" in r.stdout + r.stderr
    assert "serving" not in r.stdout + r.stderr
