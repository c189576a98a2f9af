"""llm.complete reads the endpoint's answer under a byte budget while it streams: an
endpoint that never stops answering is cancelled at min(4 MiB, max_response) plus one read;
one that drips its headers ends at the call's deadline."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, Timeout
from wbcore_testing.loopback import drip_body, drip_headers, ends_within

MiB = 1 << 20
SENT = [0]


class _Endless(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection does: never, here

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/drip/"):
            return drip_headers(self)
        if self.path.startswith("/drip-body/"):
            return drip_body(self)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(b'{"choices": [{"message": {"content": "')
            while True:
                self.wfile.write(b"a" * 65536)
                SENT[0] += 65536
        except OSError:
            pass


@pytest.fixture
def endless():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("max_response, cap", [(None, 4 * MiB), (256 << 10, 256 << 10)])
def test_endless_answer_is_cancelled_at_the_cap(make_runtime, endless, max_response, cap):
    rt = make_runtime(plugins=["llm"], env={"WB_LLM_BASE_URL": endless, "WB_LLM_MODEL": "tiny"})
    kw = {"max_response": max_response} if max_response else {}
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"}, timeout=30, **kw)
    sent0, t0 = SENT[0], time.monotonic()
    with pytest.raises(InvalidArgs, match=f"passed the {cap}-byte cap") as exc:
        rt.dock.call(c, "llm", "complete", {"prompt": "go on forever"})
    assert exc.value.reason == "too-large"
    assert time.monotonic() - t0 < 10, "stopped by the cap, not by the 30 s deadline"
    time.sleep(0.2)
    assert SENT[0] - sent0 < cap + 16 * MiB  # the cap plus what loopback socket buffers hold


def test_headers_dripped_a_byte_at_a_time_end_at_the_call_deadline(make_runtime, endless):
    rt = make_runtime(plugins=["llm"], env={"WB_LLM_BASE_URL": endless.replace("/v1", "/drip/v1"),
                                           "WB_LLM_MODEL": "tiny"})
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"}, timeout=1)
    err, took = ends_within(lambda: rt.dock.call(c, "llm", "complete", {"prompt": "hi"}), 15,
                            "llm.complete on dripped headers")
    assert isinstance(err, Timeout) and took < 8


def test_an_answer_the_deadline_cuts_short_is_a_timeout(make_runtime, endless):
    """An answer without a length ends with its connection, so the cut at the call's deadline ends
    it as the endpoint closing would: a timeout, not a short answer (nor a malformed one)."""
    rt = make_runtime(plugins=["llm"], env={"WB_LLM_BASE_URL": endless.replace("/v1", "/drip-body/v1"),
                                           "WB_LLM_MODEL": "tiny"})
    c = rt.dock.context(principal=Principal("t", "agent"), caps={"llm"}, timeout=1)
    err, took = ends_within(lambda: rt.dock.call(c, "llm", "complete", {"prompt": "hi"}), 15,
                            "llm.complete on a dripped answer")
    assert isinstance(err, Timeout) and "at the deadline" in str(err) and took < 8, err
