"""Who may talk to ``wbx mcp serve --http``: a bearer token and the Host/Origin checks,
decided by the core's one function per question (:mod:`wbcore_runtime.guard.httpguard`, shared with
``wbx engine serve``).

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

from collections.abc import Iterable
from typing import Any

from wbcore_runtime.guard import httpguard
from wbcore_runtime.guard.httpguard import LOOPBACK_NAMES, WILDCARD_BINDS, is_loopback  # noqa: F401 - re-exported

TOKEN_ENV = "WB_MCP_TOKEN"
MIN_TOKEN_CHARS = httpguard.MIN_TOKEN_CHARS


def check_token(token: str | None) -> str | None:
    """The token to require (``None``: none), refusing one too short to resist guessing."""
    return httpguard.check_token(token, option=f"--token / {TOKEN_ENV}")


def security_settings(bind: str, allow_hosts: Iterable[str] = ()) -> Any:
    """``TransportSecuritySettings`` with DNS-rebinding protection on, for any bind address,
    from the core's list of names (:func:`wbcore_runtime.guard.httpguard.host_names`)."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = httpguard.host_names(bind, allow_hosts)
    hosts = [h for n in names for h in (n, f"{n}:*")]
    origins = [o for n in names for scheme in ("http", "https") for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def warning(bind: str, token: str | None) -> str | None:
    """What to say on stderr before serving, or ``None``."""
    return httpguard.warning("wbx mcp", bind, token, TOKEN_ENV)


class BearerAuth(httpguard.Guard):
    """ASGI middleware: refuse every HTTP request without the bearer token (401), by
    :func:`wbcore_runtime.guard.httpguard.refusal`; Host/Origin are checked by the SDK's transport
    security with the same names (:func:`security_settings`)."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app, httpguard.Policy(token.encode("utf-8"), ("localhost",), "wbx mcp serve"),
                         check_hosts=False)

    def allowed(self, header: bytes | None) -> bool:
        return self.policy.token is not None and httpguard.token_matches(header, self.policy.token)
