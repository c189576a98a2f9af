"""``tools/call`` at the speed of the call: lean transports in front of the SDK.

Profiling ``wbx mcp serve`` (cProfile, b64 over stdio) showed most of each call's
server time outside the call: the SDK's stdio transport reads every line and writes
every reply through a worker thread (``anyio.wrap_file``: three thread hops a message),
validates the whole message with pydantic, and dispatches it through the runner's task
group and middleware; over streamable HTTP each POST also opens an SSE stream and a
memory-stream pair into the session's task. These paths keep that machinery for
everything but the hot request:

- a ``tools/call`` request, after the ``initialize`` handshake settled a
  handshake-era protocol version (2025-11-25 and earlier), for a listed and built tool
  (not ``search_tools``, not one built on first call), without a progress token,
  is parsed with :mod:`json`, answered by the same handler the SDK calls
  (``server.wb_answer``) and written back as one JSON-RPC response;
- every other message (``initialize``, lists, resources, skills, pings, a call that
  asks for progress, any 2026-era message) goes to the SDK server unchanged.

A ``notifications/cancelled`` for a lean call sets its cancel event (the guest stops at
its next epoch tick) and is passed on to the SDK as well. Errors keep their protocol
shape: an unknown tool is JSON-RPC ``-32602``; everything else is an ``isError`` result.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

#: The longest line (one JSON-RPC message) read from stdin; the provider caps stdin at 64 MiB.
MAX_LINE = 96 << 20
#: The SDK's versions that negotiate with ``initialize`` (the lean path's wire).
HANDSHAKE_ERA = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


class LeanCalls:
    """Decides which messages take the lean path and answers them."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.provider = server.wb_provider
        self._answer: Callable[..., Awaitable[Any]] = server.wb_answer
        self.version: str | None = None
        self.ready = False  # the handshake finished (notifications/initialized seen)
        #: (session, request id) → the anyio CancelScope of a lean call (stdio: session None)
        self.inflight: dict[tuple[str | None, Any], Any] = {}

    def saw_reply(self, payload: Any) -> None:
        """An SDK reply on its way out: the ``initialize`` result fixes the protocol version."""
        result = payload.get("result") if isinstance(payload, dict) else None
        if isinstance(result, dict) and "protocolVersion" in result and "serverInfo" in result:
            self.version = result["protocolVersion"]

    def eligible(self, msg: Any) -> bool:
        if not isinstance(msg, dict):
            return False
        method = msg.get("method")
        if method == "initialize" and self.version is None:
            # The SDK answers any initialize with a handshake-era version (the requested one
            # if it knows it, else its latest); the reply, when seen first, says which.
            self.version = HANDSHAKE_ERA[-1]
            return False
        if method == "notifications/initialized":
            self.ready = self.version in HANDSHAKE_ERA
            return False
        return self.ready and self.callable(msg)

    def callable(self, msg: Any) -> bool:
        """A ``tools/call`` request the lean path answers (the handshake aside)."""
        if (not isinstance(msg, dict) or msg.get("method") != "tools/call" or "id" not in msg
                or msg.get("jsonrpc") != "2.0"):
            return False
        params = msg.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return False
        args = params.get("arguments", {})
        meta = params.get("_meta") or {}
        if not isinstance(args, dict) or not isinstance(meta, dict) or "progressToken" in meta:
            return False
        name = params["name"]
        tools = self.provider._tools
        return tools is not None and name in tools and name not in self.provider._pending

    def cancelled(self, msg: Any, session: str | None = None) -> None:
        if isinstance(msg, dict) and msg.get("method") == "notifications/cancelled":
            params = msg.get("params") or {}
            scope = (self.inflight.get((session, params.get("requestId")))
                     if isinstance(params, dict) else None)
            if scope is not None:
                scope.cancel()  # the handler sets the call's cancel event: the guest stops at its next tick

    async def reply_unless_cancelled(self, msg: dict[str, Any],
                                     session: str | None = None) -> dict[str, Any] | None:
        """:meth:`reply`, or ``None`` when ``notifications/cancelled`` named it meanwhile (the
        handler then set the call's cancel event: the guest stops at its next tick)."""
        import anyio

        key = (session, msg["id"])
        out = None
        with anyio.CancelScope() as scope:
            self.inflight[key] = scope
            try:
                out = await self.reply(msg)
            finally:
                self.inflight.pop(key, None)
        return out

    async def reply(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC response to one eligible ``tools/call``."""
        from mcp.shared.exceptions import MCPError

        params = msg["params"]
        rid = msg["id"]
        try:
            result = await self._answer(params["name"], params.get("arguments") or {},
                                        params.get("_meta") or {}, None, raw=True)
        except MCPError as exc:
            return {"jsonrpc": "2.0", "id": rid,
                    "error": exc.error.model_dump(by_alias=True, exclude_none=True)}
        except Exception as exc:  # noqa: BLE001 — a bug, not the client's fault: the SDK answers -32603 too
            print(f"wbx mcp: tools/call failed: {exc!r}", file=sys.stderr, flush=True)
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "internal error"}}
        if not isinstance(result, dict):
            result = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return {"jsonrpc": "2.0", "id": rid, "result": result}


def _dumps(payload: Any) -> bytes:
    return (json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def parse_error(reason: str) -> dict[str, Any]:
    """The JSON-RPC answer to a message that is not JSON the server parses (``-32700``)."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {reason}"}}


def _parse(raw: bytes) -> Any:
    """``raw`` as JSON, or :class:`wbcore_runtime.contract.jsonbound.JsonRefused` (too deep, malformed)."""
    from wbcore_runtime.contract import jsonbound

    return jsonbound.loads(raw, what="the message")


class _ThreadReader:
    """Feeds a StreamReader from a file that is not a pipe or socket (stdin from /dev/null or a
    regular file): uvloop's pipe transport aborts the process on those (SIGABRT), and the
    stdlib's refuses regular files. Closed like a transport."""

    def __init__(self, loop: Any, reader: Any, fd: int) -> None:
        self._file = os.fdopen(fd, "rb", buffering=0)
        self._loop, self._reader = loop, reader
        threading.Thread(target=self._pump, name="wbcore-mcp-stdin", daemon=True).start()

    def _pump(self) -> None:
        try:
            while chunk := self._file.read(1 << 16):
                self._loop.call_soon_threadsafe(self._reader.feed_data, chunk)
        except (OSError, ValueError):
            pass  # closed under us: the server is ending
        finally:
            self._loop.call_soon_threadsafe(self._reader.feed_eof)

    def close(self) -> None:
        pass  # the pump ends at end of file; the process is ending


async def _read_into(loop: Any, reader: Any, fd: int) -> Any:
    """Connect ``reader`` to ``fd``: the event loop's pipe transport for a pipe or socket (what
    an MCP client gives), else a reading thread (:class:`_ThreadReader`)."""
    import asyncio
    import stat

    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", buffering=0))
        return transport
    return _ThreadReader(loop, reader, fd)


async def serve_stdio(server: Any, *, lean_calls: bool = True) -> None:
    """``server`` over this process's stdin/stdout with the lean ``tools/call`` path (or, with
    ``lean_calls`` false, every message through the SDK's server on this same bounded wire:
    the SDK's own stdio transport reads a line however long it grows).

    As the SDK's transport does, fd 0 and 1 are pointed at the null device and stderr
    while serving, so a handler's stray output never lands on the wire."""
    import asyncio

    import anyio
    import mcp_types as types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    lean = LeanCalls(server)
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    write_lock = threading.Lock()

    def write(data: bytes) -> None:
        with write_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(wire_out, view):]

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    transport = await _read_into(loop, reader, wire_in)
    to_sdk, sdk_in = create_context_streams[SessionMessage | Exception](0)
    sdk_out, from_sdk = create_context_streams[SessionMessage](0)

    async def answer(msg: dict[str, Any]) -> None:
        out = await lean.reply_unless_cancelled(msg)
        if out is None:
            return  # cancelled by the client: no response is sent
        if len(out_bytes := _dumps(out)) > 1 << 16:
            await anyio.to_thread.run_sync(write, out_bytes)  # a large reply must not stall the loop
        else:
            write(out_bytes)

    async def skip_rest_of_line() -> None:
        # readline dropped what it had of an over-long line; the rest, up to its newline, goes too
        while True:
            try:
                await reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                left = exc.consumed
                # dropped a MiB at a time (no copy of the whole cap); an empty read is the end
                while left and (got := len(await reader.read(min(left, 1 << 20)))):
                    left -= got
            except asyncio.IncompleteReadError:
                return

    async def read_loop(tg: Any) -> None:
        from wbcore_runtime.contract.jsonbound import JsonRefused

        async with to_sdk:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError) as exc:
                    # too long a message is refused like any unparseable one; the server goes on
                    write(_dumps(parse_error(f"the message is longer than {MAX_LINE} bytes")))
                    if "not found" in str(exc):
                        await skip_rest_of_line()
                    continue
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    msg = _parse(line)
                except JsonRefused as exc:
                    write(_dumps(parse_error(str(exc))))  # -32700, and the next line is read as usual
                    continue
                if lean_calls and lean.eligible(msg):
                    tg.start_soon(answer, msg)
                    continue
                lean.cancelled(msg)
                try:
                    parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # noqa: BLE001 — the SDK's transport hands it on the same way
                    await to_sdk.send(exc)
                    continue
                await to_sdk.send(SessionMessage(parsed))

    async def write_loop() -> None:
        async with from_sdk:
            async for session_message in from_sdk:
                data = session_message.message.model_dump(by_alias=True, exclude_unset=True, mode="json")
                lean.saw_reply(data)
                out = _dumps(data)
                if len(out) > 1 << 16:
                    await anyio.to_thread.run_sync(write, out)
                else:
                    write(out)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_loop)

            async def run_server() -> None:
                await server.run(sdk_in, sdk_out, server.create_initialization_options())
                tg.cancel_scope.cancel()

            tg.start_soon(run_server)
            await read_loop(tg)
    except* (BrokenPipeError, ConnectionResetError):
        # the client closed its end of our stdout: nothing more can be answered, so the
        # session ends as it does at the end of stdin (a full pipe is only waited on)
        print("wbx mcp: the client closed the server's output (stdout); stopping", file=sys.stderr,
              flush=True)
    finally:
        transport.close()
        os.dup2(wire_out, 1)
        os.close(wire_out)


class LeanHTTP:
    """ASGI middleware in front of the SDK's streamable HTTP app: a POST carrying one
    lean ``tools/call`` for a live session (``Mcp-Session-Id`` the SDK issued, a
    handshake-era ``MCP-Protocol-Version``) is answered with ``application/json``, which
    the transport allows for any request; Host/Origin/Content-Type are checked by the
    SDK's own ``TransportSecurityMiddleware`` with the same settings first. Everything else
    reaches the SDK app unchanged (the body it read is replayed)."""

    def __init__(self, app: Any, server: Any, *, path: str, security: Any, max_body: int) -> None:
        from mcp.server.transport_security import TransportSecurityMiddleware

        self.app = app
        self.server = server
        self.path = path
        self.lean = LeanCalls(server)
        self.security = TransportSecurityMiddleware(security)
        self.max_body = max_body

    def _live(self, session_id: str | None) -> bool:
        manager = getattr(self.server, "_session_manager", None)
        if not session_id or manager is None or session_id not in manager._server_instances:
            return False
        # A session bound to an SDK-authenticated user is the SDK's to check (owner match).
        return manager._session_owners.get(session_id) is None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers
        from starlette.requests import Request
        from starlette.responses import Response

        headers = Headers(scope=scope)
        accept = headers.get("accept", "")
        session_id = headers.get("mcp-session-id")
        if (headers.get("mcp-protocol-version") not in HANDSHAKE_ERA or not session_id
                or not self._live(session_id)
                or "application/json" not in accept or "text/event-stream" not in accept):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                await Response("Request body too large", status_code=413)(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        from wbcore_runtime.contract.jsonbound import JsonRefused

        try:
            msg = _parse(body)
        except JsonRefused as exc:  # too deep or malformed: 400 with -32700, never a RecursionError's 500
            out = json.dumps(parse_error(str(exc))).encode()
            await send({"type": "http.response.start", "status": 400, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
            await send({"type": "http.response.body", "body": out})
            return
        if not self.lean.callable(msg):
            self.lean.cancelled(msg, session_id)  # a lean call's cancellation; the SDK sees it too
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        refused = await self.security.validate_request(Request(scope), is_post=True)
        if refused is not None:
            await refused(scope, receive, send)
            return
        result = await self.lean.reply_unless_cancelled(msg, session_id)
        if result is None:  # cancelled: no JSON-RPC response; like the SDK, an event stream that ends empty
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"content-length", b"0"),
                (b"mcp-session-id", session_id.encode())]})
            await send({"type": "http.response.body", "body": b""})
            return
        out = json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(out)).encode()),
            (b"mcp-session-id", session_id.encode())]})
        await send({"type": "http.response.body", "body": out})
