"""Who may talk to a wbcore HTTP surface (``wbx mcp serve --http``, ``wbx engine serve``).

One function decides each question, and every HTTP surface calls it:

- :func:`check_token` — which bearer token to require (refusing one too short to resist
  guessing);
- :func:`token_matches` — whether an ``Authorization`` header carries it (constant time);
- :func:`host_names` — the names a ``Host`` / ``Origin`` header may carry for a bind
  address (loopback names, the bind address, the machine's names on a wildcard bind, and
  the deployer's ``--allow-host`` names);
- :func:`refusal` — the whole decision for one request: token, then Host (DNS
  rebinding), then Origin; ``None`` lets it through, else ``(status, error, description)``
  (401 / 421 / 403);
- :func:`warning` — what to say before serving a non-loopback bind without a token.

:class:`Guard` is the ASGI middleware that applies :func:`refusal` to every HTTP request.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs

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


def check_token(token: str | None, *, option: str = "--token") -> str | None:
    """The token to require (``None``: none), refusing one too short to resist guessing."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= c <= "~" for c in token):  # what a header carries
        raise InvalidArgs(f"{option}: use at least {MIN_TOKEN_CHARS} visible ASCII characters, no space or "
                          "line ending (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def token_matches(header: bytes | None, expected: bytes) -> bool:
    """``Authorization: Bearer <expected>``, compared in constant time."""
    if not header or header[:7].lower() != b"bearer ":
        return False
    return secret_matches(header[7:].strip(), expected)


def secret_matches(given: bytes, expected: bytes) -> bool:
    """The engine's token as typed into a form (the console's login), compared in constant time."""
    return bool(given) and hmac.compare_digest(given, expected)


def host_names(bind: str, extra: Iterable[str] = ()) -> list[str]:
    """The host names (no port) a request to ``bind`` may name in ``Host`` / ``Origin``."""
    names = list(LOOPBACK_NAMES)
    if bind in WILDCARD_BINDS:
        for n in {socket.gethostname(), socket.getfqdn()}:
            if n:
                names.append(n)
    elif bind:
        # any other bind names itself, loopback ones too: a server on 127.0.0.2 is reached as 127.0.0.2
        names.append(f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind)
    names.extend(h for h in extra if h)
    return list(dict.fromkeys(names))


def _strip_port(host: str) -> str:
    # a port that is no number is no port: "localhost:1@evil" names no host of ours
    if host.startswith("["):
        end = host.find("]")
        name, port = (host[: end + 1], host[end + 1:]) if end > 0 else (host, "")
        return name if port == "" or (port[:1] == ":" and (port[1:] == "" or port[1:].isdigit())) else ""
    name, sep, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    return name if port == "" or port.isdigit() else ""


def host_ok(host: str | None, names: Sequence[str]) -> bool:
    """A ``Host`` header (``name`` or ``name:port``) naming one of ``names``."""
    if not host:
        return False
    return _strip_port(host.strip().lower()) in {n.lower() for n in names}


def origin_ok(origin: str | None, names: Sequence[str]) -> bool:
    """No ``Origin`` (not a browser), or ``http(s)://`` one of ``names`` (any port)."""
    if origin is None:
        return True
    scheme, sep, rest = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or "/" in rest.rstrip("/"):
        return False
    return host_ok(rest.rstrip("/"), names)


@dataclass(frozen=True, slots=True)
class Policy:
    """What one HTTP surface requires: the bearer token (if any) and the allowed names."""

    token: bytes | None
    names: tuple[str, ...]
    surface: str = "wbx"

    @classmethod
    def for_bind(cls, bind: str, token: str | None, allow_hosts: Iterable[str] = (), *,
                 surface: str = "wbx") -> Policy:
        return cls(token.encode("utf-8") if token else None, tuple(host_names(bind, allow_hosts)), surface)


def refusal(policy: Policy, *, authorization: bytes | None, host: str | None,
            origin: str | None) -> tuple[int, str, str] | None:
    """Whether one request may pass: ``None``, or ``(status, error, description)``."""
    if policy.token is not None and not token_matches(authorization, policy.token):
        return 401, "unauthorized", (f"send Authorization: Bearer <token> "
                                     f"(the token {policy.surface} was given)")
    if not host_ok(host, policy.names):
        return 421, "invalid-host", (f"Host {host!r} is not a name this server answers to "
                                     f"({', '.join(policy.names)}); add it with --allow-host")
    if not origin_ok(origin, policy.names):
        return 403, "invalid-origin", f"Origin {origin!r} is not allowed; add its host with --allow-host"
    return None


def warning(surface: str, bind: str, token: str | None, env: str) -> str | None:
    """What to say on stderr before serving, or ``None``."""
    if token is None and not is_loopback(bind):
        return (f"{surface}: WARNING: serving on {bind or 'every address'} without a token: "
                f"anyone who can reach this port can use it. Set --token or {env}, or bind 127.0.0.1.")
    return None


class Guard:
    """ASGI middleware: every HTTP request passes :func:`refusal` or is answered with it.
    ``check_hosts=False`` leaves Host/Origin to an inner layer that applies the same
    names (the MCP SDK's transport security, built from :func:`host_names`)."""

    def __init__(self, app: Any, policy: Policy, *, check_hosts: bool = True) -> None:
        self.app = app
        self.policy = policy
        self.check_hosts = check_hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan
            return
        headers = dict(scope.get("headers", ()))
        host = headers.get(b"host")
        origin = headers.get(b"origin")
        decoded_host = host.decode("latin-1") if host is not None else None
        if not self.check_hosts:
            decoded_host = self.policy.names[0] if self.policy.names else None
            origin = None
        no = refusal(self.policy, authorization=headers.get(b"authorization"), host=decoded_host,
                     origin=origin.decode("latin-1") if origin is not None else None)
        if no is None:
            await self.app(scope, receive, send)
            return
        status, error, description = no
        body = json.dumps({"error": error, "error_description": description}).encode()
        extra = [(b"www-authenticate", b'Bearer realm="wbcore"')] if status == 401 else []
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]})
        await send({"type": "http.response.body", "body": body})
