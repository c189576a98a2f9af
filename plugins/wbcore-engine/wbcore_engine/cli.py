"""``wbx engine serve``: the engine API on the HTTP server wbcore-http-server serves (loopback, bearer
token)."""

from __future__ import annotations

import secrets
import sys
import threading
from typing import Any

import typer

TOKEN_ENV = "WB_ENGINE_TOKEN"


def build(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("serve")
    def serve_cmd(
        host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
        port: int = typer.Option(8766, "--port", help="TCP port."),
        token: str = typer.Option(
            None, "--token", envvar=TOKEN_ENV, show_envvar=True,
            help="Require 'Authorization: Bearer <token>' (≥ 16 characters); "
            "without one a random token is made and printed.",
        ),
        allow_host: list[str] = typer.Option(
            None, "--allow-host", help="Another Host/Origin name clients use to reach this engine."
        ),
    ) -> None:
        """Serve toolkits, push, calls, agent sessions and the audit trail over HTTP (docs/engine.md)."""
        serve(runtime, host=host, port=port, token=token, allow_hosts=allow_host or ())

    return app


def serve(
    runtime: Any,
    *,
    host: str = "127.0.0.1", port: int = 8766, token: str | None = None, allow_hosts: Any = (),
    ready: threading.Event | None = None, server_out: list[Any] | None = None,
) -> None:
    """Serve until interrupted. Without a token one is made and printed: the engine never
    runs without one (it can install toolkits and run commands)."""
    from wbcore_engine import app as _app
    from wbcore_runtime.contract import http_server
    from wbcore_runtime.guard import httpguard

    made = not token
    token = httpguard.check_token(token or secrets.token_urlsafe(32), option=f"--token / {TOKEN_ENV}")
    served = http_server.service(runtime)  # none installed: NotFound naming wbcore-http-server
    sock = served.listen(host, port, what="wbx engine serve")  # a busy port fails here, before any banner
    port = sock.getsockname()[1]  # --port 0 took a free one: the banner names it
    limits = _app.EngineLimits()
    asgi = _app.build(runtime, token=token, served=served, bind=host, allow_hosts=allow_hosts, limits=limits)
    # every connection-level bound (docs/engine.md "Bounds"): a whole request within its deadline,
    # connections per client and in all, the idle timeout; the open-file limit lifted to fit them
    served.raise_nofile(limits.server)
    uv = served.server(asgi, host=host, port=port, limits=limits.server, ready=ready, log_level="warning",
                       lifespan="off")
    if server_out is not None:
        server_out.append(uv)
    if made:
        print(
            f"wbx engine: token (send as 'Authorization: Bearer <token>'; set {TOKEN_ENV} to choose one): "
            f"{token}", file=sys.stderr, flush=True,
        )
    print(f"wbx engine: serving on http://{host}:{port} (OpenAPI: /openapi.json; the console: /console)",
          file=sys.stderr, flush=True)
    uv.run(sockets=[sock])
