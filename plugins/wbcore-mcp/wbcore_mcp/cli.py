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
        only: list[str] = typer.Option(None, "--only",
                                       help="List and serve only these tools or toolkits (repeat or "
                                            "comma-separate)."),
        no_search: bool = typer.Option(False, "--no-search", help="Do not offer the search_tools tool."),
        timeout: float = typer.Option(0.0, "--timeout",
                                      help="Cap every call's deadline (seconds; 0 = each profile's)."),
        build: bool = typer.Option(False, "--build",
                                   help="Build every unbuilt toolkit before serving (progress on stderr)."),
        no_build_on_call: bool = typer.Option(False, "--registered-only",
                                              help="Serve only built toolkits (do not list unbuilt ones nor "
                                                   "build on call)."),
        token: str = typer.Option(None, "--token", envvar="WB_MCP_TOKEN", show_envvar=True,
                                  help="HTTP: require 'Authorization: Bearer <token>' (≥ 16 characters)."),
        lean: bool = typer.Option(True, "--lean/--sdk-only",
                                  help="Answer tools/call on the lean path (default), or everything through "
                                       "the SDK's server."),
        allow_host: list[str] = typer.Option(None, "--allow-host",
                                             help="HTTP: another Host/Origin name clients use to reach this "
                                                  "server."),
    ) -> None:
        """Serve every available toolkit's tools and skills over MCP (unbuilt ones build on first call)."""
        from wbcore_mcp import server

        kw: dict[str, Any] = {"only": _only(only), "search_tool": not no_search, "timeout": timeout or None,
              "build_missing": not no_build_on_call, "build": build, "lean": lean}
        if http:
            server.serve_http(runtime, host=host, port=port, path=path, token=token or None,
                              allow_hosts=_only(allow_host) or (), **kw)
        else:
            import anyio

            anyio.run(lambda: server.serve_stdio(runtime, **kw), backend_options=server.loop_options())

    @app.command("tools")
    def tools(
        only: list[str] = typer.Option(None, "--only", help="Only these tools or toolkits."),
        json_: bool = typer.Option(False, "--json", help="Print the MCP tool definitions as JSON."),
        all_: bool = typer.Option(False, "--all",
                                  help="Also show each toolkit that serves no tool, and why."),
    ) -> None:
        """List the tools the server would serve (unbuilt ones are built on their first call)."""
        from wbcore_mcp.server import _mcp_tool
        from wbcore_mcp.unbuilt import ServedProvider

        provider = ServedProvider(runtime, only=_only(only))
        found = list(provider.tools().values())
        unserved = provider.unserved() if all_ else []
        if json_:
            data = [_mcp_tool(t).model_dump(by_alias=True, exclude_none=True, mode="json") for t in found]
            if all_:
                typer.echo(json.dumps({"tools": data, "unbuilt": sorted(provider.pending),
                                       "unserved": [{"toolkit": u.toolkit, "reason": u.reason}
                                                    for u in unserved]},
                                      indent=2))
            else:
                typer.echo(json.dumps(data, indent=2))
            return
        if not found:
            typer.echo("no tools: register a command, kernel or component (wbx toolkit build <id>)")
        for t in found:
            flags = "read-only" if t.definition.read_only else "writes"
            state = " · unbuilt (built on first call)" if t.name in provider.pending else ""
            typer.echo(f"{t.name} · {t.kind} · {flags}{state} · {t.description}")
        for u in unserved:
            typer.echo(f"{u.toolkit} · not served · {u.reason}")
        if not all_ and provider.unserved():
            typer.echo(f"({len(provider.unserved())} more toolkit(s) serve no tool here: wbx mcp tools --all "
                       "says why)",
                       err=True)

    return app
