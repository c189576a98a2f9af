"""A guest's egress opens to a private host only by the deployer's guest setting
(``WB_NET_ALLOW_PRIVATE_HOSTS``), never by the source/install allowances; #+ALLOWED_HOSTS
still narrows it. The brokers take their guard from the runtime's environment."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied


class _Hello(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def fetch(make_runtime, env, url, hosts=()):
    rt = make_runtime(plugins=["brokers-net"], env=env)
    ctx = rt.dock.context(principal=Principal("t", "fetch"), caps={"net"}, allowed_hosts=hosts)
    return rt.dock.call(ctx, "net", "fetch", {"url": url})


def test_loopback_is_refused_by_default_and_the_refusal_names_the_guest_setting(make_runtime, server):
    with pytest.raises(CapabilityDenied, match="loopback.*WB_NET_ALLOW_PRIVATE_HOSTS"):
        fetch(make_runtime, {}, server)


def test_the_source_allowances_do_not_open_guest_egress(make_runtime, server):
    env = {"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.1", "WB_ALLOW_PRIVATE_SOURCES": "1"}
    with pytest.raises(CapabilityDenied, match="loopback"):
        fetch(make_runtime, env, server)


def test_the_guest_setting_opens_only_what_it_names(make_runtime, server):
    got = fetch(make_runtime, {"WB_NET_ALLOW_PRIVATE_HOSTS": "127.0.0.1"}, server)
    assert got["status"] == 200 and bytes(got["body"]) == b"hello"
    other = server.replace("127.0.0.1", "127.0.0.2")  # another loopback address: not named, still refused
    with pytest.raises(CapabilityDenied, match="loopback"):
        fetch(make_runtime, {"WB_NET_ALLOW_PRIVATE_HOSTS": "127.0.0.1"}, other)
    with pytest.raises(CapabilityDenied, match="ALLOWED_HOSTS"):  # the toolkit's narrowing still holds
        fetch(make_runtime, {"WB_NET_ALLOW_PRIVATE_HOSTS": "127.0.0.0/8"}, server, hosts=("https://example.org",))
