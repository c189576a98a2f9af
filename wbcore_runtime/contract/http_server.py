"""The HTTP server contract: how every wbcore HTTP server (``wbx engine serve``, ``wbx mcp serve
--http``) is bounded, and what those surfaces ask of the server engine.

Both serve an ASGI app. :class:`ServerLimits` is the record both configure: a deadline for a whole
request to *arrive* (request line, headers, body; a silent or dripping client, slowloris, is
answered ``408`` and closed), caps on connections per client address and in all (``503`` past
either, before a request costs anything), on the request line plus headers (``431``, or ``400``
on h11), on long-lived streams (SSE) per client and in all (``503`` with ``Retry-After``) and
their lifetime, a
write stall (a client that takes none of the response waiting for it is cut), the idle
keep-alive timeout and a graceful stop's wait (docs/engine.md, "Bounds").

The engine that enforces them (uvicorn's protocol extended at the connection, the stream gate,
the listening socket, the open-file limit) is a plugin's: it serves an :class:`HttpServer`
through ``wbcore_http_servers`` (``wbcore-http-server``), and a surface takes it with
:func:`service`. Who may talk to a server (bearer token, Host, Origin) is the core's decision,
``wbcore_runtime.guard.httpguard``, never the engine's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from wbcore_runtime.contract.host import Choice

if TYPE_CHECKING:
    import socket

ENV_CHOICE = "WB_HTTP_SERVER"
NONE_INSTALLED = "no HTTP server is installed; pip install wbcore-http-server"
KiB = 1 << 10


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The four bounds of a wbcore HTTP server (seconds, counts, bytes); docs/engine.md lists them."""

    #: A whole request (line, headers, body) must arrive within this many seconds.
    request_deadline_s: float = 30.0
    #: A connection whose client takes none of the response waiting for it this long is cut.
    write_stall_s: float = 30.0
    #: Idle keep-alive connections close after this many seconds (uvicorn's ``timeout_keep_alive``).
    idle_s: int = 15
    #: Open connections in all, and from one client address.
    max_connections: int = 1024
    max_connections_per_client: int = 256
    #: Concurrent long-lived streams (SSE) in all, and from one client address.
    max_streams: int = 512
    max_streams_per_client: int = 128
    #: A stream ends after this many seconds, however busy (its client reconnects).
    max_stream_s: float = 3600.0
    #: The request line plus headers (h11's ``max_incomplete_event_size``).
    max_header_bytes: int = 32 * KiB
    #: How long a graceful stop waits for responses in progress.
    graceful_s: int = 10


class Server(Protocol):
    """A server :meth:`HttpServer.server` made, not yet running: ``run`` serves until ``should_exit``
    is set (or the process is interrupted); ``started`` says it accepts connections."""

    started: bool
    should_exit: bool

    def run(self, sockets: list[socket.socket] | None = None) -> None: ...


class HttpServer(Protocol):
    """What ``HttpServerService.factory(runtime)`` returns (``wbcore-http-server``)."""

    def listen(self, host: str, port: int, *, what: str, option: str = "--port") -> socket.socket:
        """The server's socket, bound and listening before anything says "serving": a busy or
        refused address is ``InvalidArgs`` naming it, ``what`` serves and ``option`` to change
        (exit 2). Hand it to :meth:`Server.run`."""
        ...

    def raise_nofile(self, limits: ServerLimits, *, spare: int = 256) -> int:
        """Lift the soft open-file limit so ``limits.max_connections`` (plus ``spare``) fits, as far
        as the hard limit allows; the soft limit in force."""
        ...

    def stream_gate(self, app: Any, limits: ServerLimits, *,
                    is_stream: Callable[[dict[str, Any]], bool]) -> Any:
        """ASGI middleware over ``app``: the requests ``is_stream`` picks (long-lived responses) are
        admitted up to ``limits.max_streams`` in all and ``limits.max_streams_per_client`` per
        client address; one past either is answered ``503`` (``too-many-streams``)."""
        ...

    def server(self, app: Any, *, host: str, port: int, limits: ServerLimits,
               ready: threading.Event | None = None, **options: Any) -> Server:
        """A :class:`Server` for the ASGI ``app`` on ``host:port`` with every bound of ``limits``
        (``options``: the engine's own, e.g. ``log_level``, ``lifespan``); ``ready`` is set once it
        accepts connections."""
        ...


#: ``service(runtime, name)``: the HTTP server engine to use (``contract.host.Choice``).
service: Choice[HttpServer] = Choice(lambda r: r.http_servers, ENV_CHOICE, ("HTTP server", "HTTP servers"),
                                     NONE_INSTALLED)
