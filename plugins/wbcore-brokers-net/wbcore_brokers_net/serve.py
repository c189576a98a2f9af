"""The ``serve`` cap (ServeBroker): the host listens on loopback, the guest answers.

``listen`` opens an HTTP listener on 127.0.0.1 (an ephemeral port) and returns its
``serve_id`` and port. Each inbound request waits in that listener's channel until the
guest takes it with ``next`` (``{id, method, path, headers, body}``, or ``null`` after
``timeout``) and answers with ``respond`` (``{serve_id, id, status, headers?, body?}``).
Guards: loopback only; ≤ 4 listeners per principal; request bodies ≤ 1 MiB and ≤ 64
waiting requests (else 413 / 503); a response body over 16 MiB is refused with
``too-large`` and the client gets 502; a request the guest does not answer within 30 s
gets 504; every inbound request re-checks revocation (403 once revoked) and every
guest call goes through the Dock's cadence. A listener closes on ``close``, at its
context's deadline, or after 60 s without a ``next``.

Host threads are bounded: a listener serves at most 16 connections at once (one thread
each; the next is answered 503 and closed), each read waits at most 10 s, and a request
(line, headers, body) must arrive whole within 15 s of the connection opening or the last
answer, else its connection is cut. Closing a listener cuts its connections and joins
their threads: none outlives ``close``.
"""

from __future__ import annotations

import itertools
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound

MAX_LISTENERS = 4
MAX_REQUEST_BODY = 1 << 20
MAX_RESPONSE_BODY = 16 << 20
MAX_WAITING = 64
ANSWER_WAIT = 30.0
IDLE = 60.0
#: Connections served at once per listener (a host thread each), a read's wait, a request's.
MAX_CONNECTIONS = 16
READ_TIMEOUT = 10.0
REQUEST_DEADLINE = 15.0
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 5\r\n\r\nbusy\n"


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most :data:`MAX_CONNECTIONS` of them; a request that has
    not arrived whole within :data:`REQUEST_DEADLINE` has its connection cut (checked on
    each turn of ``serve_forever``); :meth:`cut_all` ends every connection and joins its thread."""

    daemon_threads = True
    # socketserver's 5 reorders a burst of clients (the kernel retries the rest later)
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.lock = threading.Lock()
        #: socket -> the monotonic time its current request began to arrive (None: it arrived)
        self.reading: dict[socket.socket, float | None] = {}
        self.workers: set[threading.Thread] = set()
        #: sockets cut past their deadline: what their handler parsed up to the cut is no request
        self.cut: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
                request.setblocking(False)
                request.recv(1 << 16)  # what already came: unread input would turn the close into a reset
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self.lock:
            self.reading[request] = time.monotonic()
        t = threading.Thread(target=self._work, args=(request, client_address), name="wbcore-serve-conn",
                             daemon=True)
        with self.lock:
            self.workers.add(t)
        t.start()

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.reading.pop(request, None)
                self.cut.discard(request)
                self.workers.discard(threading.current_thread())
            self.slots.release()

    def arrived(self, request: Any, whole: bool) -> None:
        """The handler's request arrived whole (``True``), or the next one begins (``False``)."""
        with self.lock:
            if request in self.reading:
                self.reading[request] = None if whole else time.monotonic()

    def service_actions(self) -> None:
        now = time.monotonic()
        with self.lock:
            late = [s for s, since in self.reading.items()
                    if since is not None and now - since > REQUEST_DEADLINE]
        for s in late:
            with self.lock:
                self.cut.add(s)
            _cut(s)

    def cut_all(self, wait: float = 5.0) -> None:
        with self.lock:
            socks, workers = list(self.reading), list(self.workers)
            self.cut.update(socks)
        for s in socks:
            _cut(s)
        end = time.monotonic() + wait
        for t in workers:
            t.join(max(0.0, end - time.monotonic()))


def _cut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the thread's blocked read returns at once
    except OSError:
        pass


@dataclass
class _Pending:
    id: int
    method: str
    path: str
    headers: list[list[str]]
    body: bytes
    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[int, list[list[str]], bytes] | None = None


class Listener:
    def __init__(self, owner: str, deadline: float | None, revoked: Any) -> None:
        self.id = uuid.uuid4().hex[:16]
        self.owner = owner
        self.deadline = deadline
        self.waiting: queue.Queue[_Pending] = queue.Queue(MAX_WAITING)
        self.inflight: dict[int, _Pending] = {}
        self.ids = itertools.count(1)
        self.last_next = time.monotonic()
        self.closed = False
        listener = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = READ_TIMEOUT  # every read of the socket waits at most this long

            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                if self.request in listener.server.cut:  # its headers ended at the cut, not the client's
                    self.close_connection = True
                    return None
                if revoked(owner):
                    return self._reply(403, [], b"revoked\n")
                n = int(self.headers.get("Content-Length") or 0)
                if n > MAX_REQUEST_BODY:
                    self.close_connection = True  # the unread body must not be parsed as a request
                    return self._reply(413, [["Connection", "close"]], b"request body too large\n")
                body = self.rfile.read(n) if n else b""
                listener.server.arrived(self.request, True)
                p = _Pending(next(listener.ids), self.command, self.path,
                             [[k, v] for k, v in self.headers.items()], body)
                try:
                    listener.waiting.put_nowait(p)
                except queue.Full:
                    return self._reply(503, [], b"busy\n")
                if not p.done.wait(ANSWER_WAIT) or p.answer is None:
                    listener.inflight.pop(p.id, None)
                    return self._reply(504, [], b"the guest did not answer\n")
                self._reply(*p.answer)

            def _reply(self, status: int, headers: list[list[str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("content-length", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                listener.server.arrived(self.request, False)  # the next request's deadline starts now

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self.server = _BoundedServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                       daemon=True)
        self.thread.start()

    def expired(self) -> bool:
        now = time.monotonic()
        return (self.closed or (self.deadline is not None and now > self.deadline)
                or now - self.last_next > IDLE)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.server.shutdown()
            self.server.server_close()
            for p in list(self.inflight.values()):
                p.done.set()
            while True:  # requests no guest will take: answered now, their threads end
                try:
                    self.waiting.get_nowait().done.set()
                except queue.Empty:
                    break
            self.server.cut_all()
            self.thread.join(5.0)


class ServeBroker:
    def __init__(self, revoked: Any) -> None:
        self._revoked = revoked
        self._lock = threading.Lock()
        self.listeners: dict[str, Listener] = {}

    def _reap(self) -> None:
        for sid, lst in list(self.listeners.items()):
            if lst.expired():
                lst.close()
                self.listeners.pop(sid, None)

    def _get(self, call: BrokerCall) -> Listener:
        sid = call.arg("serve_id", str)
        with self._lock:
            self._reap()
            lst = self.listeners.get(sid)
        if lst is None or lst.owner != str(call.ctx.principal):
            raise NotFound(f"serve: no open listener {sid!r} for {call.ctx.principal}")
        return lst

    def handle(self, call: BrokerCall) -> Any:
        who = str(call.ctx.principal)
        if call.op == "listen":
            with self._lock:
                self._reap()
                mine = sum(1 for lst in self.listeners.values() if lst.owner == who)
                if mine >= MAX_LISTENERS:
                    raise refuse(CapabilityDenied, "quota",
                                 f"serve: {who} already has {mine} listeners (cap {MAX_LISTENERS})")
                lst = Listener(who, call.ctx.deadline, lambda owner: self._revoked(owner, "serve"))
                self.listeners[lst.id] = lst
            call.target(f"http://127.0.0.1:{lst.port}/")
            return {"serve_id": lst.id, "port": lst.port, "url": f"http://127.0.0.1:{lst.port}/"}
        lst = self._get(call)
        if call.op == "next":
            lst.last_next = time.monotonic()
            wait = min(float(call.arg("timeout", (int, float), 5.0)), call.ctx.remaining(30.0), 30.0)
            try:
                p = lst.waiting.get(timeout=max(wait, 0.0))
            except queue.Empty:
                return {"request": None}
            try:  # a request the guest's answer cannot carry is answered 413, not lost in flight
                ByteBudget.for_call(call, None, "serve.next").take(
                    len(p.body) + len(p.path) + sum(len(k) + len(v) for k, v in p.headers))
            except InvalidArgs:
                p.answer = (413, [], b"the request is larger than the guest can take\n")
                p.done.set()
                raise
            lst.inflight[p.id] = p
            return {"request": {"id": p.id, "method": p.method, "path": p.path, "headers": p.headers,
                                "body": p.body}}
        if call.op == "respond":
            rid = call.arg("id", int)
            waiting = lst.inflight.pop(rid, None)
            if waiting is None:
                raise NotFound(f"serve: request {rid} is not waiting for an answer (answered, or timed out)")
            status = call.arg("status", int, 200)
            headers = call.arg("headers", list, [])
            body = call.args.get("body", b"")
            if isinstance(body, str):
                body = body.encode()
            if not isinstance(body, bytes) or not 100 <= status <= 599:
                waiting.answer = (502, [], b"bad answer from the guest\n")
                waiting.done.set()
                raise InvalidArgs("serve.respond: body must be bytes/text and status 100..599")
            if len(body) > MAX_RESPONSE_BODY:
                waiting.answer = (502, [], b"the guest's answer was too large\n")
                waiting.done.set()
                raise refuse(InvalidArgs, "too-large",
                             f"serve.respond: body of {len(body)} bytes exceeds {MAX_RESPONSE_BODY}")
            if not all(isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h)
                       for h in headers):
                headers = []
            waiting.answer = (status, headers[:64], body)
            waiting.done.set()
            return {"ok": True}
        if call.op == "close":
            with self._lock:
                self.listeners.pop(lst.id, None)
            lst.close()
            return {"closed": True}
        raise InvalidArgs(f"serve: unknown operation {call.op!r}")
