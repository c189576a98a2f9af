"""The HTTP server engine of every wbcore HTTP server (``wbx engine serve``, ``wbx mcp serve --http``):
an ASGI app on uvicorn with every bound of ``wbcore_runtime.contract.http_server.ServerLimits``.

uvicorn brings some bounds of its own, used as they are: ``timeout_keep_alive`` (an idle
keep-alive connection closes), ``limit_concurrency`` (a backstop: 503 past it) and, on its h11
protocol, ``h11_max_incomplete_event_size`` (a request line plus headers larger than it is
refused with 400). It has no deadline for a request to *arrive*: a client that opens a socket
and sends nothing, or one header byte every few seconds (slowloris), holds its connection for
ever — uvicorn only times out the gap *after* a response. :func:`protocol_class` adds what is
missing, at the depth where a connection exists (the asyncio protocol; nothing above it sees a
request that never came), on uvicorn's httptools protocol when httptools is installed (about
twice h11's requests per second), else on h11:

- **a deadline to receive a whole request** (request line, headers and body), started when
  the connection opens and again after each response: a request still incomplete then is
  answered ``408`` and the connection closed (an app already handling the request sees
  ``http.disconnect``);
- **a cap on connections per client address and in all**: one past either is answered
  ``503`` and closed at once, before it costs a request;
- on httptools, which has no limit of its own, **the request line plus headers** are
  capped like h11's setting: past ``max_header_bytes`` without the end of the headers the
  client gets ``431`` and the connection closes; and **pipelined requests** (sent behind one
  that waits for its response), which httptools parses and queues at once where h11 reads no
  further: past ``max_header_bytes`` of them, or ``_PIPELINED`` queued, the connection closes
  (an answer would have to follow the earlier responses), so neither a head that never ends
  behind a stream nor a flood of small requests grows the server's memory.
- **a write stall**: uvicorn's flow control keeps a response's memory to the transport's
  buffer (an app's ``send`` waits while it is full), but waits for ever on a client that
  stops reading, and closing a connection waits for its buffer to flush: output that waits
  ``write_stall_s`` with none of it taken (the buffer full, or left after the response)
  aborts the connection, which frees the app's ``send``, the buffer and the connection's
  place under the caps. A slow reader that takes some of it in each stretch goes on.

:class:`StreamGate` caps the long-lived responses (SSE streams) per client and in all, and
ends each at ``max_stream_s`` (an app may hold one for ever: the MCP SDK's ``GET`` stream
lives while its client is connected, and one whose client vanished writes nothing to fail);
:func:`raise_nofile` lifts the process's open-file limit to what the caps need, and
:func:`listen` binds the socket before anything says "serving". :class:`Uvicorn` is what the
plugin serves (``contract.http_server.HttpServer``); the surfaces take it with
``contract.http_server.service(runtime)``.
"""

from __future__ import annotations

import errno
import resource
import socket
import threading
from collections.abc import Callable
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract.host import RuntimeServices
from wbcore_runtime.contract.http_server import HttpServer, Server, ServerLimits

_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"retry-after: 5\r\ncontent-length: %d\r\n\r\n%s")
_TOO_BIG = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s")
_TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: %d\r\n\r\n%s")
#: httptools: bytes fed to the parser at a time, and requests it may hold queued behind the one
#: being answered (a client that pipelines more is cut; h11 reads no further until each is answered)
_SLICE, _PIPELINED = 4096, 16


def _body(error: str, message: str) -> bytes:
    import json

    return json.dumps({"error": error, "message": message}).encode()


def _canned(template: bytes, error: str, message: str) -> bytes:
    body = _body(error, message)
    return template % (len(body), body)


def _base_protocol() -> tuple[type, bool]:
    """uvicorn's httptools protocol when httptools is installed, else its h11 one; and
    whether the header cap must be ours (httptools has none)."""
    try:
        import httptools  # noqa: F401

        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol, False
    return HttpToolsProtocol, True


def protocol_class(limits: ServerLimits, *, base: type | None = None) -> type:
    """uvicorn's HTTP protocol with the request deadline, the connection caps and the header
    cap of ``limits`` (one class per server: its counters are the server's). ``base``:
    uvicorn's ``H11Protocol`` or ``HttpToolsProtocol`` (default: httptools when installed)."""
    if base is None:
        base, own_header_cap = _base_protocol()
    else:
        own_header_cap = base.__name__ != "H11Protocol"
    per_client: dict[str, int] = {}
    total = [0]

    class Bounded(base):  # type: ignore[misc, valid-type]
        _counted: str | None = None
        _deadline: Any = None
        _head_bytes = 0  # bytes received while the current request's headers are incomplete
        _ahead = 0  # bytes received while a whole request waited for its response (pipelined)
        _stall: Any = None  # the write-stall timer, while output waits for the client
        _stall_left = 0  # the bytes waiting when it was armed
        _took = False  # the client took output since (the transport resumed writing)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            who = self.client[0] if self.client else "?"
            if (total[0] >= limits.max_connections
                    or per_client.get(who, 0) >= limits.max_connections_per_client):
                scope = "in all" if total[0] >= limits.max_connections else f"from {who}"
                transport.write(_canned(_REFUSED, "too-many-connections",
                                        f"this server holds its cap of open connections {scope}; "
                                        "retry later"))
                transport.close()
                return
            self._counted = who
            total[0] += 1
            per_client[who] = per_client.get(who, 0) + 1
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
            who, self._counted = self._counted, None
            if who is not None:
                total[0] -= 1
                left = per_client.get(who, 1) - 1
                if left > 0:
                    per_client[who] = left
                else:
                    per_client.pop(who, None)
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._head_bytes = 0
            if self.transport.get_write_buffer_size():
                self._watch_writes()  # the app is done, the client is not: a close would wait on it
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection has its own deadline

        def pause_writing(self) -> None:
            super().pause_writing()  # the app's next send waits (uvicorn's flow control)
            self._watch_writes()

        def resume_writing(self) -> None:
            super().resume_writing()
            self._took = True

        def _watch_writes(self) -> None:
            if self._stall is None:
                self._stall_left, self._took = self.transport.get_write_buffer_size(), False
                self._stall = self.loop.call_later(limits.write_stall_s, self._stalled)

        def _stalled(self) -> None:
            self._stall = None
            left = self.transport.get_write_buffer_size()
            if not left and not self.flow.write_paused:
                return  # all taken
            if self._took or left < self._stall_left:
                self._watch_writes()  # the client is reading, if slowly: watch the next stretch
                return
            self.transport.abort()  # nothing taken: drop the output, free the app and the connection

        if own_header_cap:
            def data_received(self, data: bytes) -> None:
                # a slice at a time: the parser queues a request per head it completes, so the caps
                # below are checked before it has queued more than a slice's worth
                for at in range(0, len(data), _SLICE):
                    if self.transport.is_closing() or self.transport.get_protocol() is not self:
                        return  # cut, or upgraded (uvicorn drops the rest of the chunk too)
                    self._feed(data[at:at + _SLICE])

            def _feed(self, data: bytes) -> None:
                before = self.cycle
                if before is not None and not before.more_body and not before.response_complete:
                    # a request arrived whole and waits for its response: these bytes are requests
                    # pipelined behind it (h11 leaves them unparsed, reading paused; httptools queues
                    # them), capped like a head; an answer would have to come after the earlier ones
                    self._ahead += len(data)
                    if self._ahead > limits.max_header_bytes or len(self.pipeline) >= _PIPELINED:
                        self.transport.close()
                        return
                elif before is None or before.response_complete:
                    self._ahead = 0  # nothing waits for a response
                super().data_received(data)
                if self.cycle is not before:  # the headers ended in this chunk: a request began
                    self._head_bytes = 0
                    return
                if before is not None and not before.response_complete:
                    return  # body bytes of the request in progress
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_header_bytes and not self.transport.is_closing():
                    self.transport.write(_canned(_TOO_BIG, "too-large", "the request line and headers exceed "
                                                 f"{limits.max_header_bytes} bytes"))
                    self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_deadline_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            cycle = self.cycle
            waiting = cycle is None or cycle.response_complete  # no request since the last response
            if not waiting and not cycle.more_body:
                return  # the whole request arrived: the app's own bounds take over
            if self.transport.is_closing():
                return
            if waiting or not cycle.response_started:
                self.transport.write(_canned(_TIMED_OUT, "timeout", "the request did not arrive within "
                                             f"{limits.request_deadline_s:g} s"))
            self.transport.close()

    return Bounded


def uvicorn_config(app: Any, *, host: str, port: int, limits: ServerLimits, **kw: Any) -> Any:
    """A ``uvicorn.Config`` for ``app`` with every bound of ``limits`` (its own settings first)."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=protocol_class(limits),
                          timeout_keep_alive=limits.idle_s, timeout_graceful_shutdown=limits.graceful_s,
                          limit_concurrency=limits.max_connections + 1,
                          h11_max_incomplete_event_size=limits.max_header_bytes, **kw)


def raise_nofile(limits: ServerLimits, *, spare: int = 256) -> int:
    """Lift the soft open-file limit so the connection cap (plus ``spare`` for files, pipes
    and guests) fits, as far as the hard limit allows; return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = limits.max_connections + spare
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft


class StreamGate:
    """ASGI middleware: the requests ``is_stream`` picks (long-lived responses, such as SSE)
    are admitted up to ``limits.max_streams`` in all and ``limits.max_streams_per_client``
    per client address; one past either is answered ``503`` with ``Retry-After``. Each ends
    after ``limits.max_stream_s``: the app is cancelled and its response finished."""

    def __init__(self, app: Any, limits: ServerLimits, is_stream: Callable[[dict[str, Any]], bool]) -> None:
        self.app = app
        self.limits = limits
        self.is_stream = is_stream
        self.total = 0
        self.per_client: dict[str, int] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.is_stream(scope):
            await self.app(scope, receive, send)
            return
        who = (scope.get("client") or ("?", 0))[0]
        if (self.total >= self.limits.max_streams
                or self.per_client.get(who, 0) >= self.limits.max_streams_per_client):
            where = "in all" if self.total >= self.limits.max_streams else f"from {who}"
            body = _body("too-many-streams",
                         f"this server holds its cap of open streams {where}; close one or retry later")
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"retry-after", b"5"),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.total += 1
        self.per_client[who] = self.per_client.get(who, 0) + 1
        try:
            await self._for_its_lifetime(scope, receive, send)
        finally:
            self.total -= 1
            left = self.per_client.get(who, 1) - 1
            if left > 0:
                self.per_client[who] = left
            else:
                self.per_client.pop(who, None)


    async def _for_its_lifetime(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The app, cancelled at ``limits.max_stream_s``; a response it started is then finished
        (an empty last chunk), so the client sees the stream end and may reconnect."""
        import anyio

        state = {"started": False, "ended": False}

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["ended"] = True
            await send(message)

        with anyio.move_on_after(self.limits.max_stream_s) as lifetime:
            await self.app(scope, receive, watched)
        if not lifetime.cancelled_caught or state["ended"]:
            return
        try:
            if state["started"]:
                await send({"type": "http.response.body", "body": b""})
            else:
                body = _body("timeout", f"a stream lasts at most {self.limits.max_stream_s:g} s; reconnect")
                await send({"type": "http.response.start", "status": 504, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
        except OSError:
            pass  # the client left meanwhile


def listen(host: str, port: int, *, what: str, option: str = "--port") -> socket.socket:
    """The server's socket, bound before anything says "serving": a busy or refused address is
    an error that names it and what to do (exit 2), never a banner followed by uvicorn's exit 3.
    Hand it to ``uvicorn.Server.run(sockets=[sock])``."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # as uvicorn binds: a port in TIME_WAIT after a restart is not "busy"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidArgs(f"{what}: port {port} on {host} is already in use; stop what listens there, "
                              f"or choose another port with {option}") from None
        if exc.errno == errno.EACCES:
            raise InvalidArgs(f"{what}: not allowed to listen on port {port} "
                              f"(ports below 1024 need privileges); choose another with {option}") from None
        raise InvalidArgs(f"{what}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                          "check the address given with --host, "
                          f"or choose another port with {option}") from None
    sock.listen(2048)  # listening, not only bound: a client acting on "serving on" is queued, never refused
    return sock


class Uvicorn:
    """The served engine (``contract.http_server.HttpServer``): this module's functions, and a
    ``uvicorn.Server`` with every bound in force."""

    def listen(self, host: str, port: int, *, what: str, option: str = "--port") -> socket.socket:
        return listen(host, port, what=what, option=option)

    def raise_nofile(self, limits: ServerLimits, *, spare: int = 256) -> int:
        return raise_nofile(limits, spare=spare)

    def stream_gate(self, app: Any, limits: ServerLimits, *,
                    is_stream: Callable[[dict[str, Any]], bool]) -> Any:
        return StreamGate(app, limits, is_stream)

    def server(self, app: Any, *, host: str, port: int, limits: ServerLimits,
               ready: threading.Event | None = None, **options: Any) -> Server:
        import uvicorn

        uv = uvicorn.Server(uvicorn_config(app, host=host, port=port, limits=limits, **options))
        if ready is not None:
            orig = uv.startup

            async def startup(sockets: Any = None) -> None:
                await orig(sockets)
                ready.set()

            uv.startup = startup  # type: ignore[method-assign]
        return uv


def service(_runtime: RuntimeServices) -> HttpServer:
    """``HttpServerService.factory``: the engine holds no state (each server's counters are its own)."""
    return Uvicorn()

