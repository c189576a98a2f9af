"""wbcore-mcp installed alone with the core: its tool list comes from the core's ACT provider."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")


def test_tools_are_listed_through_the_core_alone(make_runtime, wbx) -> None:
    rt = make_runtime(plugins=["mcp"])  # no other plugin: the ACT model and provider are the core's
    r = wbx("mcp", "tools", runtime=rt)
    assert r.exit_code == 0 and r.stdout.startswith("no tools: register a command")
    r = wbx("mcp", "tools", "--json", runtime=rt)
    assert (r.exit_code, json.loads(r.stdout)) == (0, [])


def test_the_server_builds_over_the_core_alone(make_runtime) -> None:
    from wbcore_mcp.server import SERVER_NAME, build_server

    server = build_server(make_runtime(plugins=["mcp"]), search_tool=True)
    assert server.name == SERVER_NAME
