"""``wbx mcp serve`` (stdio or streamable HTTP) and ``wbx mcp tools``."""

from __future__ import annotations

import json
from typing import Any

import typer


def _only(values: list[str] | None) -> list[str] | None:
    names = [n for v in values or [] for n in v.replace(",", " ").split() if n]
    return names or None


def build(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("serve")
    def serve(
        http: bool = typer.Option(False, "--http", help="Serve streamable HTTP instead of stdio."),
        host: str = typer.Option("127.0.0.1", "--host", help="HTTP bind address (loopback by default)."),
        port: int = typer.Option(8765, "--port", help="HTTP port."),
        path: str = typer.Option("/mcp", "--path", help="HTTP endpoint path."),
        only: list[str] = typer.Option(None, "--only", help="List and serve only these tools or toolkits (repeat or comma-separate)."),
        no_search: bool = typer.Option(False, "--no-search", help="Do not offer the search_tools tool."),
        timeout: float = typer.Option(0.0, "--timeout", help="Cap every call's deadline (seconds; 0 = each profile's)."),
    ) -> None:
        """Serve every registered toolkit's tools and skills over MCP."""
        from wb_mcp import server

        kw = {"only": _only(only), "search_tool": not no_search, "timeout": timeout or None}
        if http:
            server.serve_http(runtime, host=host, port=port, path=path, **kw)
        else:
            import anyio

            anyio.run(lambda: server.serve_stdio(runtime, **kw))

    @app.command("tools")
    def tools(
        only: list[str] = typer.Option(None, "--only", help="Only these tools or toolkits."),
        json_: bool = typer.Option(False, "--json", help="Print the MCP tool definitions as JSON."),
    ) -> None:
        """List the tools the server would serve."""
        from wb_mcp.server import _mcp_tool
        from wbcore.act.provider import ToolkitProvider

        provider = ToolkitProvider(runtime, only=_only(only))
        found = list(provider.tools().values())
        if json_:
            data = [_mcp_tool(t).model_dump(by_alias=True, exclude_none=True, mode="json") for t in found]
            typer.echo(json.dumps(data, indent=2))
            return
        if not found:
            typer.echo("no tools: register a command, kernel or component (wbx toolkit build <id>)")
        for t in found:
            flags = "read-only" if t.definition.read_only else "writes"
            typer.echo(f"{t.name} · {t.kind} · {flags} · {t.description}")

    return app
