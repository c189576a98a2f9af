"""A scripted model server on loopback for tests: real HTTP, two wire formats.

``ScriptedLlm("openai")`` answers ``POST …/chat/completions`` and ``ScriptedLlm("anthropic")``
answers ``POST …/v1/messages``, each streamed (server-sent events, as the vendors' APIs
stream) or as one JSON body, from a script of turns given by the test::

    with ScriptedLlm("openai") as llm:
        llm.script = [reply(tool("wb", op="list")), failure(503), reply(tool("done", result="ok"))]
        env = {"WB_LLM_BASE_URL": llm.base_url, ...}

Each request takes the next turn; a turn is a :func:`reply`, a :func:`failure` or a
callable ``(request_body) -> turn``. Misbehaving servers are scripted too:
:func:`plain` answers a streamed request with one JSON body (a server that ignores
``stream``), :func:`empty` sends a stream with no text and no tool call, :func:`raw`
sends any bytes under any content type and headers, and :func:`endless` an answer that
never ends (a body that keeps growing, or keep-alive comments on an event stream).
Requests are recorded (``llm.requests``: path, headers, body) so a test can check what the
provider sent. A test fixture, never a
default: nothing in the product uses it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Turn:
    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    status: int = 200
    input_tokens: int = 11
    output_tokens: int = 7
    delay_s: float = 0.0
    #: Answer with one JSON body even when the request asked for a stream.
    ignore_stream: bool = False
    #: Send these bytes (under ``content_type``) instead of a well-formed answer.
    body: bytes | None = None
    content_type: str = "application/json"
    #: False: the openai stream carries no usage chunk, as some local servers send none
    usage: bool = True
    #: More headers sent with ``body`` (e.g. ``Content-Encoding``).
    headers: tuple[tuple[str, str], ...] = ()
    #: Writes the whole answer on the wire itself (:func:`endless`).
    wire: Callable[[BaseHTTPRequestHandler], None] | None = None


def tool(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return (name, arguments)


def reply(*calls: tuple[str, dict[str, Any]], text: str = "", input_tokens: int = 11, output_tokens: int = 7,
          usage: bool = True) -> Turn:
    return Turn(text=text, tool_calls=tuple(calls), input_tokens=input_tokens, output_tokens=output_tokens,
                usage=usage)


def failure(status: int) -> Turn:
    return Turn(status=status)


def plain(turn: Turn) -> Turn:
    """``turn`` sent as one JSON body whatever the request asked (a server ignoring ``stream``)."""
    return Turn(**{**turn.__dict__, "ignore_stream": True})


def empty() -> Turn:
    """A well-formed answer with no text and no tool call."""
    return Turn()


def raw(body: bytes, content_type: str = "application/json", **headers: str) -> Turn:
    """These bytes as the answer, under ``content_type`` and ``headers`` (``Content_Encoding="gzip"``
    is sent as ``Content-Encoding: gzip``): a broken, foreign or hostile server."""
    return Turn(body=body, content_type=content_type,
                headers=tuple((k.replace("_", "-"), v) for k, v in headers.items()))


def endless(content_type: str, piece: bytes, *, head: bytes = b"", every_s: float = 0.0,
            limit: int = 1 << 40, sent: list[int] | None = None) -> Turn:
    """An answer that does not end: ``head``, then ``piece`` every ``every_s`` seconds until
    ``limit`` bytes are out, then silence until the client goes (no ``Content-Length``: the body
    would end with the connection). ``sent[0]`` counts the bytes written."""
    count = sent if sent is not None else [0]

    def wire(h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Connection", "close")
        h.end_headers()
        try:
            h.wfile.write(head)
            count[0] += len(head)
            while count[0] < limit:
                h.wfile.write(piece)
                h.wfile.flush()
                count[0] += len(piece)
                time.sleep(every_s)
            while h.connection.recv(1 << 16):  # silence: wait for the client to leave
                pass
        except OSError:
            pass

    return Turn(wire=wire)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ScriptedLlm:
    format: str  # "openai" | "anthropic"
    script: list[Any] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    #: A turn used once the script is spent (None: HTTP 500 saying the script ran out).
    default: Any = None

    def __post_init__(self) -> None:
        if self.format not in ("openai", "anthropic"):
            raise ValueError(f"format must be openai or anthropic, not {self.format!r}")
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        host, port = self._server.server_address[:2]
        # an AF_UNIX server's is bytes; ours is IPv4
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}" + ("/v1" if self.format == "openai" else "")

    def start(self) -> ScriptedLlm:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                owner._answer(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedLlm:  # noqa: PYI034 - 3.11 target, no typing.Self needed
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- serving ------------------------------------------------------------------

    def _next(self, body: dict[str, Any]) -> Turn | None:
        with self._lock:
            turn = self.script.pop(0) if self.script else self.default
        while callable(turn):
            turn = turn(body)
        return turn

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        with self._lock:
            self.requests.append(Request(h.path, {k.lower(): v for k, v in h.headers.items()}, body))
        turn = self._next(body)
        if turn is None:
            return self._send(h, 500,
                              {"error": {"type": "api_error", "message": "the test's script ran out"}})
        if turn.wire is not None:
            return turn.wire(h)
        if turn.delay_s:
            time.sleep(turn.delay_s)
        if turn.status != 200:
            extra = {"retry-after": "0"} if turn.status == 429 else {}
            return self._send(h, turn.status,
                              {"error": {"type": "api_error", "message": f"scripted failure {turn.status}"}},
                              extra)
        if turn.body is not None:
            h.send_response(200)
            h.send_header("Content-Type", turn.content_type)
            for k, v in turn.headers:
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(turn.body)))
            h.end_headers()
            h.wfile.write(turn.body)
            return None
        events = self._openai(turn, body) if self.format == "openai" else self._anthropic(turn, body)
        if body.get("stream") and not turn.ignore_stream:
            data = b"".join(
                (f"event: {name}\n" if name else "").encode() + b"data: " + (
                    payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
                for name, payload in events)
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        else:
            self._send(h, 200, self._whole(turn, body))

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, doc: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _whole(self, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model", "scripted")
        if self.format == "openai":
            msg: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.tool_calls:
                msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                      "function": {"name": n, "arguments": json.dumps(a)}}
                                     for i, (n, a) in enumerate(turn.tool_calls)]
            return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
                    "usage": {"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens,
                              "total_tokens": turn.input_tokens + turn.output_tokens}}
        content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
        content += [{"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a}
                    for i, (n, a) in enumerate(turn.tool_calls)]
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": "tool_use" if turn.tool_calls else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}}

    def _openai(self, turn: Turn, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
        model = body.get("model", "scripted")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
            return (None, {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        out: list[tuple[str | None, Any]] = [chunk({"role": "assistant", "content": ""})]
        words = turn.text.split(" ") if turn.text else []
        for i, w in enumerate(words):  # several deltas: the provider must join them
            out.append(chunk({"content": w + (" " if i < len(words) - 1 else "")}))
        for i, (name, args) in enumerate(turn.tool_calls):
            text = json.dumps(args)
            half = len(text) // 2
            out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                              "function": {"name": name, "arguments": text[:half]}}]}))
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": text[half:]}}]}))
        out.append(chunk({}, "tool_calls" if turn.tool_calls else "stop"))
        if turn.usage and (body.get("stream_options") or {}).get("include_usage"):
            out.append((None, {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0,
                               "model": model, "choices": [],
                               "usage": {"prompt_tokens": turn.input_tokens,
                                         "completion_tokens": turn.output_tokens,
                                         "total_tokens": turn.input_tokens + turn.output_tokens}}))
        out.append((None, b"[DONE]"))
        return out

    def _anthropic(self, turn: Turn, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
        model = body.get("model", "scripted")
        out: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1}}})]
        idx = 0
        if turn.text:
            out.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                                "content_block": {"type": "text", "text": ""}}))
            words = turn.text.split(" ")
            for i, w in enumerate(words):
                out.append(("content_block_delta", {"type": "content_block_delta", "index": idx, "delta": {
                    "type": "text_delta", "text": w + (" " if i < len(words) - 1 else "")}}))
            out.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
            idx += 1
        for i, (name, args) in enumerate(turn.tool_calls):
            text = json.dumps(args)
            half = len(text) // 2
            out.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                                "content_block": {"type": "tool_use", "id": f"toolu_{i}",
                                                                  "name": name, "input": {}}}))
            for part in (text[:half], text[half:]):
                out.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": part}}))
            out.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
            idx += 1
        out.append(("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "tool_use" if turn.tool_calls else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": turn.output_tokens}}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

