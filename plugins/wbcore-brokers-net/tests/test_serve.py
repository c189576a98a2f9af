"""serve: the host listens on loopback, a guest (here driven from Python) answers."""

from __future__ import annotations

import threading

import httpx
import pytest

from wbcore_audit_trail import reader
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs


def _guest(dock, ctx, sid, answers):
    while True:
        try:
            req = dock.call(ctx, "serve", "next", {"serve_id": sid, "timeout": 2})["request"]
        except CapabilityDenied:
            return
        if req is None:
            continue
        body = answers(req)
        try:
            dock.call(ctx, "serve", "respond",
                      {"serve_id": sid, "id": req["id"], "status": 200, "body": body})
        except InvalidArgs:
            pass
        if req["path"] == "/stop":
            return


def test_serve_roundtrip_caps_and_revocation(make_runtime):
    rt = make_runtime(plugins=["brokers-net"])
    dock = rt.dock
    ctx = dock.context(principal=Principal("t", "server"), caps={"serve"}, timeout=30)
    got = dock.call(ctx, "serve", "listen")
    sid, url = got["serve_id"], got["url"]
    assert url.startswith("http://127.0.0.1:")

    def answers(req):
        if req["path"] == "/big":
            return b"x" * ((16 << 20) + 1)
        return b"you asked for " + req["path"].encode() + b" with " + req["body"]

    t = threading.Thread(target=_guest, args=(dock, ctx, sid, answers), daemon=True)
    t.start()
    with httpx.Client(trust_env=False, timeout=10) as client:
        r = client.post(url + "hello", content=b"data")
        assert (r.status_code, r.content) == (200, b"you asked for /hello with data")
        assert client.get(url + "big").status_code == 502  # over the response cap
        assert client.post(url + "x", content=b"y" * ((1 << 20) + 1)).status_code == 413
        dock.revoke(ctx.principal, "serve")
        assert client.get(url + "after").status_code == 403
    t.join(5)
    assert not t.is_alive()
    reasons = [e["reason"] for e in reader.entries(dock.audit) if e["outcome"] == "denied"]
    assert "too-large" in reasons and "revoked" in reasons


def test_listener_quota(make_runtime):
    rt = make_runtime(plugins=["brokers-net"])
    ctx = rt.dock.context(principal=Principal("t", "many"), caps={"serve"})
    for _ in range(4):
        rt.dock.call(ctx, "serve", "listen")
    with pytest.raises(CapabilityDenied, match="cap 4"):
        rt.dock.call(ctx, "serve", "listen")
    for lst in list(rt.dock.driver("serve").listeners.values()):
        lst.close()


def _serve_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wbcore-serve-conn" and t.is_alive()]


def test_slow_clients_do_not_pin_host_threads_and_close_leaves_none(make_runtime, monkeypatch):
    """Silent and dripping clients hold at most MAX_CONNECTIONS threads; the rest get 503; a
    request that does not arrive within the deadline is cut; close joins every thread."""
    import socket
    import time

    from wbcore_brokers_net import serve

    monkeypatch.setattr(serve, "REQUEST_DEADLINE", 3.0)
    rt = make_runtime(plugins=["brokers-net"])
    ctx = rt.dock.context(principal=Principal("t", "slow"), caps={"serve"}, timeout=60)
    got = rt.dock.call(ctx, "serve", "listen")
    before = len(_serve_threads())
    socks = []
    try:
        for i in range(serve.MAX_CONNECTIONS + 24):
            s = socket.create_connection(("127.0.0.1", got["port"]), timeout=5)
            if i < serve.MAX_CONNECTIONS:
                s.sendall(b"GET / HTTP/1.1\r\n")  # a request that never finishes its headers
                time.sleep(0.01)
            socks.append(s)
        time.sleep(0.3)
        assert len(_serve_threads()) - before <= serve.MAX_CONNECTIONS
        refused = 0
        for s in socks[serve.MAX_CONNECTIONS:]:
            s.settimeout(5)
            if s.recv(64).startswith(b"HTTP/1.1 503"):
                refused += 1
        assert refused == 24
        # past the deadline every held connection is cut: its read sees the end
        for s in socks[: serve.MAX_CONNECTIONS]:
            s.settimeout(5)
            assert s.recv(64) == b""
        deadline = time.monotonic() + 5
        while len(_serve_threads()) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_serve_threads()) == before
        # held again, then closed: close cuts them and joins every thread
        held = [socket.create_connection(("127.0.0.1", got["port"]), timeout=5) for _ in range(8)]
        time.sleep(0.2)
        assert len(_serve_threads()) - before == 8
        listener = rt.dock.driver("serve").listeners[got["serve_id"]]
        rt.dock.call(ctx, "serve", "close", {"serve_id": got["serve_id"]})
        assert len(_serve_threads()) == before
        assert not listener.thread.is_alive()  # the accept loop too
        for s in held:
            s.close()
    finally:
        for s in socks:
            s.close()
