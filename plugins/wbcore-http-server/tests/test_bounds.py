"""The HTTP server's bounds, on both of uvicorn's HTTP protocols: a whole request's deadline
(silent and dripping clients, a body that never ends), connection caps per client and in all,
the header cap, stream caps per client and in all (``stream_gate``). The server is the one the
surfaces take (``contract.http_server.service``), serving a small ASGI app; misbehaving clients
connect from other loopback addresses (127.0.0.3, 127.0.0.4) so the per-client caps are what
they meet. The surfaces' own tests (wbcore-engine's test_engine_bounds, test_console) check that
their routes are served with these bounds."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from wbcore_runtime.contract import http_server
from wbcore_runtime.contract.http_server import ServerLimits

SMALL = ServerLimits(request_deadline_s=1.5, max_connections=64, max_connections_per_client=24,
                     max_streams=8, max_streams_per_client=3)
BIG, CHUNK = 16 << 20, 64 << 10
ENDED: list[str] = []  # the /big responses whose app call returned (or raised), by query


@pytest.fixture(autouse=True, params=["httptools", "h11"])
def protocol(request, monkeypatch) -> str:
    """Every bound holds on both of uvicorn's HTTP protocols (httptools is the default)."""
    from wbcore_http_server import serve

    if request.param == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        monkeypatch.setattr(serve, "_base_protocol", lambda: (H11Protocol, False))
    else:
        pytest.importorskip("httptools")
    return request.param


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/events``: a stream held until the client leaves (or ``?wait=`` seconds); else ``ok``
    once the whole body has arrived."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/big":  # 16 MiB in one send (as a JSON response), or in 64 KiB sends
        query = scope["query_string"].decode()
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(BIG).encode())]})
            if "chunked" in query:
                for _ in range(BIG // CHUNK):
                    await send({"type": "http.response.body", "body": b"x" * CHUNK, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                await send({"type": "http.response.body", "body": b"x" * BIG})
        finally:
            ENDED.append(query)
        return
    if scope["path"] == "/events":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"event: ready\n\n", "more_body": True})
        wait = float(dict(p.split("=") for p in scope["query_string"].decode().split("&") if p)
                     .get("wait", "10"))
        try:
            while (await asyncio.wait_for(receive(), wait))["type"] != "http.disconnect":
                pass
        except TimeoutError:
            pass
        await send({"type": "http.response.body", "body": b""})
        return
    more = True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
        more = msg.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def serve(make_runtime) -> Iterator[Any]:
    """``serve(limits=SMALL, bind=…)`` → the URL of the served HTTP server on a free port."""
    stops: list[tuple[Any, threading.Thread]] = []
    served = http_server.service(make_runtime(plugins=["http-server"]))

    def start(limits: ServerLimits = SMALL, bind: str = "127.0.0.1") -> str:
        sock = served.listen(bind, 0, what="the test server")
        port = sock.getsockname()[1]
        app = served.stream_gate(_app, limits, is_stream=lambda scope: scope["path"] == "/events")
        ready = threading.Event()
        uv = served.server(app, host=bind, port=port, limits=limits, ready=ready, log_level="warning",
                           lifespan="off")
        thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        stops.append((uv, thread))
        assert ready.wait(5) and uv.started, "the server did not start"
        return f"http://{bind}:{port}"

    yield start
    for uv, thread in stops:
        uv.should_exit = True
        thread.join(timeout=10)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _recv_all(s: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = s.recv(4096)
        except (ConnectionResetError, TimeoutError):
            return out
        if not chunk:
            return out
        out += chunk


def test_silent_and_dripping_clients_are_cut_at_the_deadline_and_capped_per_client(serve) -> None:
    url = serve()
    port = _port(url)
    silent = [_connect(port, "127.0.0.3") for _ in range(30)]  # 6 past the per-client cap
    drip = _connect(port, "127.0.0.4")
    try:
        t0 = time.monotonic()
        r = httpx.get(url + "/x", timeout=5)
        assert r.status_code == 200 and time.monotonic() - t0 < 1.0  # the good client is not blocked
        answers = [_recv_all(s) for s in silent[24:]]  # refused at once, before any request
        assert all(a.startswith(b"HTTP/1.1 503") and b"too-many-connections" in a
                   and b"from 127.0.0.3" in a for a in answers), answers
        for byte in b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n":  # a header byte every 0.1 s
            try:
                drip.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        got = _recv_all(drip)
        assert got.startswith(b"HTTP/1.1 408") and b"within 1.5 s" in got  # the drip did not extend it
        for s in silent[:24]:
            assert _recv_all(s).startswith(b"HTTP/1.1 408")
        # the cap is free again
        again = _connect(port, "127.0.0.3")
        again.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert _recv_all(again).startswith(b"HTTP/1.1 200")  # reached the app
        again.close()
    finally:
        for s in [*silent, drip]:
            s.close()


def test_connections_are_capped_in_all(serve) -> None:
    url = serve(ServerLimits(request_deadline_s=5, max_connections=4, max_connections_per_client=24))
    port = _port(url)
    held = [_connect(port, "127.0.0.3") for _ in range(4)]
    try:
        time.sleep(0.2)  # the server has counted them
        other = _connect(port, "127.0.0.4")
        got = _recv_all(other)
        other.close()
        assert (got.startswith(b"HTTP/1.1 503") and b"too-many-connections" in got and b"in all" in got
                and b"retry-after: 5" in got), got
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the server notices they closed
        try:
            if httpx.get(url + "/x", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    assert httpx.get(url + "/x", timeout=5).status_code == 200


def test_a_body_that_does_not_arrive_in_time_is_cut(serve) -> None:
    s = _connect(_port(serve()), "127.0.0.3")
    try:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        got = _recv_all(s)
        assert time.monotonic() - t0 < 5
        assert got.startswith(b"HTTP/1.1 408") or got == b""  # answered 408 by whichever layer saw it first
    finally:
        s.close()


def test_streams_are_capped_per_client_and_in_all(serve) -> None:
    url = serve()
    with httpx.Client(timeout=10) as c:
        held = []
        try:
            for _ in range(SMALL.max_streams_per_client):
                cm = c.stream("GET", url + "/events", params={"wait": 10})
                resp = cm.__enter__()
                assert resp.status_code == 200
                held.append(cm)
            r = c.get(url + "/events", params={"wait": 10})
            assert (r.status_code == 503 and r.json()["error"] == "too-many-streams"
                    and "from 127.0.0.1" in r.json()["message"] and r.headers["retry-after"] == "5")
            assert c.get(url + "/x").status_code == 200  # other routes are not streams
        finally:
            for cm in held:
                cm.__exit__(None, None, None)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the server notices the streams ended
            r = c.get(url + "/events", params={"wait": 0.1})
            if r.status_code == 200:
                break
            time.sleep(0.1)
        assert r.status_code == 200
    total = serve(ServerLimits(max_streams=2, max_streams_per_client=128))
    with httpx.Client(timeout=10) as c:
        held = []
        try:
            for _ in range(2):
                cm = c.stream("GET", total + "/events", params={"wait": 10})
                assert cm.__enter__().status_code == 200
                held.append(cm)
            r = c.get(total + "/events", params={"wait": 10})
            assert r.status_code == 503 and "open streams in all" in r.json()["message"]
        finally:
            for cm in held:
                cm.__exit__(None, None, None)


def test_headers_past_the_cap_are_refused(serve, protocol) -> None:
    url = serve()
    s = _connect(_port(url), "127.0.0.3")
    try:
        s.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(SMALL.max_header_bytes // 1000 + 8):  # a header line at a time, never the end
            try:
                s.sendall(f"X-Pad-{i}: {'p' * 990}\r\n".encode())
            except OSError:
                break
        got = _recv_all(s)
        assert got.startswith(b"HTTP/1.1 431" if protocol == "httptools" else b"HTTP/1.1 400"), got[:80]
    finally:
        s.close()
    r = httpx.get(url + "/x", headers={"x-fine": "f" * 8000}, timeout=5)
    assert r.status_code == 200  # headers under the cap pass


def test_a_client_that_does_not_read_its_response_is_cut_after_the_write_stall(serve) -> None:
    """A client asks for a large response and never reads it: flow control keeps the server's
    memory to its buffer, and ``write_stall_s`` without the client taking any of it closes the
    connection, whether the app is still sending (blocked in ``send``) or the whole response
    already went to the transport (the app returned; the connection would wait for ever to
    flush before it closes). The connections held count against the per-client cap meanwhile."""
    limits = ServerLimits(request_deadline_s=1.5, idle_s=1, max_connections_per_client=2, write_stall_s=1.5)
    port = _port(serve(limits))
    ENDED.clear()
    held = []
    for query in ("whole", "chunked"):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's buffer fills
        s.settimeout(5)
        s.bind(("127.0.0.3", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET /big?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        held.append(s)  # and never read
    try:
        time.sleep(0.5)
        refused = _connect(port, "127.0.0.3")
        assert _recv_all(refused).startswith(b"HTTP/1.1 503")  # both held: the per-client cap is met
        refused.close()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            again = _connect(port, "127.0.0.3")
            again.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            got = _recv_all(again)
            again.close()
            if got.startswith(b"HTTP/1.1 200"):
                break
            time.sleep(0.25)
        assert got.startswith(b"HTTP/1.1 200"), f"the stalled connections still hold the cap: {got[:60]!r}"
        assert time.monotonic() - t0 < 6
        assert sorted(ENDED) == ["chunked", "whole"]  # the app blocked in send was let go too
    finally:
        for s in held:
            s.close()


def test_a_stream_ends_at_its_lifetime_whatever_the_app_does(serve) -> None:
    """A stream the app would hold (for ever, for the MCP SDK's GET stream, while its client is
    connected, or one whose client vanished without a word) ends after ``max_stream_s``: the
    response is finished cleanly, the app is cancelled, and its place under the caps is free."""
    limits = ServerLimits(max_streams=1, max_streams_per_client=1, max_stream_s=1.0)
    url = serve(limits)
    with httpx.Client(timeout=10) as c:
        t0 = time.monotonic()
        with c.stream("GET", url + "/events", params={"wait": 60}) as r:
            assert r.status_code == 200
            body = b"".join(r.iter_bytes())  # a cleanly finished response: no error here
        assert body == b"event: ready\n\n"
        assert time.monotonic() - t0 < 4, "the stream outlived its lifetime"
        assert c.get(url + "/events", params={"wait": 0.1}).status_code == 200  # the cap is free


def _ended(s: socket.socket, within: float) -> bool:
    """Whether the server closed ``s`` (end of stream or reset) within ``within`` seconds,
    whatever it sent before."""
    s.settimeout(within)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def test_a_head_that_never_ends_behind_a_stream_is_cut(serve, protocol) -> None:
    """Bytes a client sends behind a request that arrived whole (pipelining) are the next
    request's head: while the first is answered (a stream may last an hour) they count
    against ``max_header_bytes`` too, so a head that never ends cannot grow the server's
    memory (httptools parsed and kept every header line; h11 reads no further)."""
    if protocol == "h11":
        pytest.skip("h11 reads nothing behind a request until it is answered")
    s = _connect(_port(serve()), "127.0.0.3")
    try:
        s.sendall(b"GET /events?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while b"event: ready" not in got:
            got += s.recv(4096)
        s.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        s.settimeout(0.5)
        try:
            for i in range(8 * SMALL.max_header_bytes // 1000):
                s.sendall(f"X-Pad-{i}: {'p' * 990}\r\n".encode())
        except OSError:
            pass  # cut while sending, or the buffers are full
        assert _ended(s, 3), "the stream's connection took a head past the cap and stayed open"
    finally:
        s.close()


def test_a_client_that_pipelines_without_end_is_cut(serve, protocol) -> None:
    """A few pipelined requests are answered in order; a client that pipelines small requests
    without end (and reads the answers, so no write stall cuts it) is cut once it has
    ``max_header_bytes`` of them or too many queued: httptools queued every one it parsed,
    and let in more after each answer, faster than it answered (memory grew ~7 MB/s)."""
    url = serve()
    one = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    s = _connect(_port(url), "127.0.0.3")
    try:
        s.sendall(one * 3 + b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert _recv_all(s).count(b"HTTP/1.1 200") == 4
    finally:
        s.close()
    if protocol == "h11":
        return  # h11 reads no further behind a request until it is answered: nothing queues
    s = _connect(_port(url), "127.0.0.3")
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                if not s.recv(65536):
                    break
            except OSError:
                break

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    cut = False
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 5:
            s.sendall(one * 2000)
    except OSError:
        cut = True
    finally:
        stop.set()
        s.close()
        reader.join(timeout=5)
    assert cut, "a client pipelining without end was never cut"
    assert httpx.get(url + "/x", timeout=5).status_code == 200
