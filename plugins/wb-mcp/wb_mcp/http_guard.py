"""Who may talk to ``wbx mcp serve --http``: a bearer token and the Host/Origin checks.

- **Token** (``--token`` or ``WB_MCP_TOKEN``): every HTTP request must carry
  ``Authorization: Bearer <token>``; the comparison is constant-time
  (:func:`hmac.compare_digest`); anything else is ``401`` with ``WWW-Authenticate: Bearer``
  before the MCP transport sees the request.
- **Host / Origin** (DNS rebinding): on *every* bind address the SDK's
  ``TransportSecuritySettings`` checks run: the ``Host`` header must name the bind
  address, a loopback name, the machine's host name (wildcard binds) or an ``--allow-host``;
  an ``Origin``, when sent, must be ``http(s)://`` one of those. Others get ``421`` / ``403``.
- **Warning**: a bind that is not loopback without a token says so on stderr.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable
from typing import Any

from wbcore.errors import InvalidArgs

TOKEN_ENV = "WB_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None) -> str | None:
    """The token to require (``None``: none), refusing one too short to resist guessing."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_CHARS or token != token.strip():
        raise InvalidArgs(f"--token / {TOKEN_ENV}: use at least {MIN_TOKEN_CHARS} characters without surrounding "
                          "spaces (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def _host_names(bind: str, extra: Iterable[str]) -> list[str]:
    names = list(LOOPBACK_NAMES)
    if bind in WILDCARD_BINDS:
        for n in {socket.gethostname(), socket.getfqdn()}:
            if n:
                names.append(n)
    elif not is_loopback(bind):
        names.append(f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind)
    names.extend(h for h in extra if h)
    return list(dict.fromkeys(names))


def security_settings(bind: str, allow_hosts: Iterable[str] = ()) -> Any:
    """``TransportSecuritySettings`` with DNS-rebinding protection on, for any bind address."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = _host_names(bind, allow_hosts)
    hosts = [h for n in names for h in (n, f"{n}:*")]
    origins = [o for n in names for scheme in ("http", "https") for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def warning(bind: str, token: str | None) -> str | None:
    """What to say on stderr before serving, or ``None``."""
    if token is None and not is_loopback(bind):
        return (f"wbx mcp: WARNING: serving on {bind or 'every address'} without a token: anyone who can reach this "
                f"port can run its tools. Set --token or {TOKEN_ENV}, or bind 127.0.0.1.")
    return None


class BearerAuth:
    """ASGI middleware: refuse every HTTP request without the bearer token (401)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token.encode("utf-8")

    def allowed(self, header: bytes | None) -> bool:
        if not header or header[:7].lower() != b"bearer ":
            return False
        return hmac.compare_digest(header[7:].strip(), self._expected)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan
            return
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if self.allowed(header):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized",
                           "error_description": "send Authorization: Bearer <token> (the token wbx mcp serve was given)"}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer realm="wbcore"')]})
        await send({"type": "http.response.body", "body": body})
