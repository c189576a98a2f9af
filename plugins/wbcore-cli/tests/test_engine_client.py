"""The engine client (``wbx --engine``): its token is for the engine's origin only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wbcore_cli import engine_client
from wbcore_runtime.contract.errors import InvalidArgs, Timeout
from wbcore_testing.loopback import ends_within

TOKEN = "t0k-abcdefghijklmnop"


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, t


@pytest.fixture
def origins() -> Iterator[tuple[int, int, list[str]]]:
    """An engine on one port that redirects ``/away`` to another port (another origin) and
    ``/here`` to itself; every ``Authorization`` either receives is recorded."""
    seen: list[str] = []
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            port = self.server.server_address[1]
            seen.append(f"{port} {self.path} {self.headers.get('Authorization', '-')}")
            if self.path == "/drip":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                try:
                    for _ in range(1000):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    pass
                return
            target = {"/away": f"http://127.0.0.1:{ports[1]}/v1/ok", "/here": "/v1/ok"}.get(self.path)
            if target:
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            body = b'{"ok": true}' if ok else b'{"message": "token wanted"}'
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    servers = [_serve(Handler) for _ in range(2)]
    ports.extend(s.server_address[1] for s, _ in servers)
    yield ports[0], ports[1], seen
    for srv, _ in servers:
        srv.shutdown()
        srv.server_close()


def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(origins):
    engine, other, seen = origins
    assert engine_client.call(f"http://127.0.0.1:{engine}", "/v1/ok", token=TOKEN) == {"ok": True}
    for path in ("/away", "/here"):
        with pytest.raises(InvalidArgs, match=r"HTTP 302, a redirect to http://127\.0\.0\.1:\d+/v1/ok; "):
            engine_client.call(f"http://127.0.0.1:{engine}", path, token=TOKEN)
    assert all(not s.startswith(f"{other} ") for s in seen), seen


def test_an_engine_dripping_its_answer_is_cut_at_the_deadline(origins):
    """A byte every 0.2 s passes every per-read timeout; the exchange's one deadline ends it."""
    engine, _, _ = origins
    err, took = ends_within(lambda: engine_client.call(f"http://127.0.0.1:{engine}", "/drip", token=TOKEN,
                                                       timeout=1.0), 1.0 + 5.0, "a dripped answer")
    assert isinstance(err, Timeout) and "no answer within 1 s" in str(err), err


def test_a_token_with_a_line_ending_is_refused_without_showing_it(origins):
    """A token read from a file with Windows line endings ends in ``\\r``: refused by the rule the
    engine keeps (``httpguard.check_token``), naming the setting, never the token."""
    engine, _, seen = origins
    for bad in (f"{TOKEN}\r", "t0k"):
        with pytest.raises(InvalidArgs, match="WB_ENGINE_TOKEN") as exc:
            engine_client.call(f"http://127.0.0.1:{engine}", "/v1/ok", token=bad)
        assert "t0k" not in str(exc.value)
    assert seen == []
