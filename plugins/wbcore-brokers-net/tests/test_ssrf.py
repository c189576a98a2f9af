"""NetGuard, CappedHttp and the socket brokers through the Dock — loopback targets only."""

from __future__ import annotations

import pytest

from wbcore_audit_trail import reader
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, Timeout
from wbcore_brokers_net import allowlist
from wbcore_brokers_net.brokers import NetBroker, SocketBroker
from wbcore_brokers_net.guard import NetGuard, parse_literal, why_denied

from wbcore_testing.loopback import ends_within
from wbnet_targets import PUBLIC_IP

CAPS = {"net", "browse", "tcp", "udp", "tls"}


@pytest.fixture
def dock(make_runtime, dns, tls_cert):
    rt = make_runtime(plugins=["brokers-net"])
    guard = NetGuard(resolver=dns, public=frozenset({PUBLIC_IP}))
    d = rt.dock
    d.set_driver("net", NetBroker(guard, verify=str(tls_cert[0])))
    d.set_driver("browse", NetBroker(guard, text_only=True))
    for kind in ("tcp", "udp", "tls"):
        d.set_driver(kind, SocketBroker(kind, guard, cafile=str(tls_cert[0])))
    return d


def ctx(dock, hosts=(), **kw):
    return dock.context(principal=Principal("t", "fetch"), caps=CAPS, allowed_hosts=hosts, **kw)


URL_CORPUS = [
    "http://127.0.0.1/", "http://localhost/", "http://127.1/", "http://0177.0.0.1/", "http://0x7f.0.0.1/",
    "http://0x7f000001/", "http://2130706433/", "http://017700000001/", "http://0/", "http://0.0.0.0/",
    "http://127.000.000.001/", "http://0x7f.1/", "http://[::1]/", "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/", "http://[::127.0.0.1]/", "http://[2002:7f00:1::]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "http://[fe80::1]/", "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/", "http://[fd12:3456::1]/", "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/", "http://2852039166/", "http://10.0.0.1/", "http://10.255.255.255/",
    "http://172.16.0.1/", "http://172.31.255.255/", "http://192.168.0.1/", "http://100.64.0.1/",
    "http://100.127.255.254/", "http://224.0.0.1/", "http://255.255.255.255/", "http://evil-private.test/",
    "http://evil-loop.test/", "http://meta.test/", "http://mixed.test/", "http://v6loop.test/",
    "http://mapped.test/", "http://cgnat.test/", "http://ula.test/", "http://127.0.0.1.nip.io/",
    "http://nxdomain.test/", "http://LOCALHOST./",
]
REDIRECT_CORPUS = ["/redirect-private", "/redirect-meta", "/redirect-v6", "/redirect-name"]


def test_ssrf_corpus_is_denied_and_each_denial_audited(dock, http_target):
    c = ctx(dock)
    urls = URL_CORPUS + [f"http://public.test:{http_target}{p}" for p in REDIRECT_CORPUS]
    for url in urls:
        with pytest.raises(CapabilityDenied) as exc:
            dock.call(c, "net", "fetch", {"url": url, "timeout": 5})
        assert exc.value.reason == "ssrf", (url, exc.value.message)
    for host, kind in (("127.0.0.1", "tcp"), ("localhost", "tls"), ("10.0.0.1", "udp"),
                       ("169.254.169.254", "tcp"), ("[::1]", "tcp"), ("0x7f.1", "udp")):
        with pytest.raises(CapabilityDenied):
            dock.call(c, kind, "exchange", {"host": host, "port": 80, "data": b"x", "timeout": 2})
    entries = [e for e in reader.entries(dock.audit) if e["outcome"] == "denied"]
    assert len(urls) + 6 >= 40
    assert len(entries) == len(urls) + 6
    assert all(e["reason"] == "ssrf" for e in entries)
    redirected = [e for e in entries if e["target"] and "169.254.169.254" in e["target"]]
    assert redirected, "the audit names the hop that was denied"
    assert reader.verify(dock.audit) == []


def test_public_target_is_reached_on_its_pinned_address(dock, http_target):
    got = dock.call(ctx(dock), "net", "fetch", {"url": f"http://public.test:{http_target}/hello"})
    assert got["status"] == 200 and got["body"] == f"hello from public.test:{http_target}".encode()
    got = dock.call(ctx(dock), "net", "fetch", {"url": f"http://public.test:{http_target}/redirect-public"})
    assert got["redirects"] == 1 and got["body"].startswith(b"hello")


def test_credentials_stay_with_the_origin_they_were_sent_to(dock, http_target):
    """A redirect to another allowed host never carries the guest's Authorization or Cookie
    (an open redirect on the API host must not hand its token to a second host)."""
    sent = {"Authorization": "Bearer s3cret", "Cookie": "session=s3cret", "X-Custom": "kept"}
    hosts = (f"http://public.test:{http_target}", f"http://other.test:{http_target}")
    got = dock.call(ctx(dock, hosts), "net", "fetch",
                    {"url": f"http://public.test:{http_target}/redirect-other", "headers": sent})
    assert got["redirects"] == 1 and got["url"] == f"http://other.test:{http_target}/headers"
    assert got["body"] == b"authorization=-\ncookie=-\nx-custom=kept"
    got = dock.call(ctx(dock, hosts), "net", "fetch",
                    {"url": f"http://public.test:{http_target}/redirect-same", "headers": sent})
    assert got["body"] == b"authorization=Bearer s3cret\ncookie=session=s3cret\nx-custom=kept"


def test_a_header_with_a_line_ending_is_refused_by_name_before_any_hop(dock, http_target):
    for headers in ({"X-A": "1\r\nHost: evil.test"}, {"X-A\r\nHost": "evil.test"}, {"X-A": "caf\u00e9"}):
        with pytest.raises(InvalidArgs, match="header") as exc:
            dock.call(ctx(dock), "net", "fetch", {"url": f"http://public.test:{http_target}/hello",
                                                  "headers": headers})
        assert "evil" not in exc.value.message and "connect" not in exc.value.message


def test_dns_rebinding_cannot_move_the_pin(dock, dns, http_target):
    got = dock.call(ctx(dock), "net", "fetch", {"url": f"http://rebind.test:{http_target}/ok"})
    assert got["body"] == f"hello from rebind.test:{http_target}".encode()
    assert dns.calls.count("rebind.test") == 1  # resolved once, connected to the checked address
    with pytest.raises(CapabilityDenied, match="loopback"):  # a later lookup has rebound: re-checked
        dock.call(ctx(dock), "net", "fetch", {"url": f"http://rebind.test:{http_target}/ok"})


def test_body_cap_deadline_and_redirect_limit(dock, http_target):
    c = ctx(dock)
    with pytest.raises(InvalidArgs, match="passed the 1048576-byte cap") as exc:
        dock.call(c, "net", "fetch", {"url": f"http://public.test:{http_target}/big", "max_bytes": 1 << 20})
    assert exc.value.reason == "too-large"
    with pytest.raises(Timeout):
        dock.call(c, "net", "fetch", {"url": f"http://public.test:{http_target}/slow", "timeout": 0.5})
    with pytest.raises(InvalidArgs, match="redirects"):
        dock.call(c, "net", "fetch", {"url": f"http://public.test:{http_target}/redirect-loop"})
    with pytest.raises(CapabilityDenied, match="scheme"):
        dock.call(c, "net", "fetch", {"url": "file:///etc/passwd"})


def test_headers_dripped_a_byte_at_a_time_end_at_the_call_deadline(dock, http_target):
    """A server that sends one header byte every 0.1 s passes every per-read timeout: the call's
    deadline still ends the exchange, and the host's thread with it."""
    url = f"http://public.test:{http_target}/drip-headers"
    err, took = ends_within(lambda: dock.call(ctx(dock), "net", "fetch", {"url": url, "timeout": 0.5}), 15,
                            "net.fetch of dripped headers")
    assert isinstance(err, Timeout) and err.reason == "deadline" and took < 6


def test_a_body_the_deadline_cuts_short_is_a_timeout_not_an_answer(dock, http_target):
    """A body without a length ends with its connection, so the cut at the deadline ends it as the
    server closing would: the guest gets a timeout, never the bytes that arrived by then."""
    url = f"http://public.test:{http_target}/drip-body"
    err, took = ends_within(lambda: dock.call(ctx(dock), "net", "fetch", {"url": url, "timeout": 0.5}), 15,
                            "net.fetch of a dripped body")
    assert isinstance(err, Timeout) and err.reason == "deadline" and took < 6, err


def test_allowed_hosts_narrow_net(dock, http_target):
    ok = ctx(dock, hosts=(f"http://public.test:{http_target}",))
    assert dock.call(ok, "net", "fetch", {"url": f"http://public.test:{http_target}/x"})["status"] == 200
    narrow = ctx(dock, hosts=("https://*.example.com",))
    with pytest.raises(CapabilityDenied, match="ALLOWED_HOSTS") as exc:
        dock.call(narrow, "net", "fetch", {"url": f"http://public.test:{http_target}/x"})
    assert exc.value.reason == "not-allowed-host"
    redirect_out = ctx(dock, hosts=(f"http://public.test:{http_target}",))
    with pytest.raises(CapabilityDenied, match="ALLOWED_HOSTS"):
        dock.call(redirect_out, "net", "fetch", {"url": f"http://public.test:{http_target}/redirect-rebind"})


@pytest.mark.parametrize(("rule", "url", "ok"), [
    ("https://*.example.com", ("https", "api.example.com", 443), True),
    ("https://*.example.com", ("https", "a.b.example.com", 443), True),
    ("https://*.example.com", ("https", "example.com", 443), False),
    ("https://*.example.com", ("https", "evilexample.com", 443), False),
    ("https://*.example.com", ("http", "api.example.com", 80), False),
    ("https://api.example.com", ("https", "API.Example.COM", 443), True),
    ("https://api.example.com", ("https", "api.example.com", 8443), False),
    ("https://api.example.com:*", ("https", "api.example.com", 8443), True),
    ("*://api.example.com:*", ("tcp", "api.example.com", 25), True),
    ("tcp://*:5432", ("tcp", "db.example.com", 5432), True),
    ("http://[2001:db8::1]:8080", ("http", "2001:db8::1", 8080), True),
])
def test_allowlist_rules(rule, url, ok):
    if ok:
        allowlist.check([rule], *url)
    else:
        with pytest.raises(CapabilityDenied):
            allowlist.check([rule], *url)


def test_allowlist_rejects_bad_wildcards():
    with pytest.raises(InvalidArgs):
        allowlist.parse_rule("https://api.*.com")


def test_literal_parsing_and_classes():
    assert str(parse_literal("0x7f.1")) == "127.0.0.1"
    assert str(parse_literal("2852039166")) == "169.254.169.254"
    assert parse_literal("example.com") is None
    assert why_denied(parse_literal("8.8.8.8")) is None
    assert why_denied(parse_literal("2606:4700::1111")) is None
    assert "6to4" in why_denied(parse_literal("2002:a00:1::"))


def test_tcp_udp_tls_exchanges_with_pinned_peers(dock, tcp_echo, udp_echo, tls_echo):
    c = ctx(dock)
    assert dock.call(c, "tcp", "exchange",
                     {"host": "public.test", "port": tcp_echo, "data": b"ping"})["data"] == b"PING"
    assert dock.call(c, "udp", "exchange",
                     {"host": "public.test", "port": udp_echo, "data": b"abc"})["data"] == b"cba"
    port, seen = tls_echo
    got = dock.call(c, "tls", "exchange", {"host": "public.test", "port": port, "data": b"hi", "timeout": 5})
    assert got["data"] == b"echo:public.test:hi"  # SNI = the host name, not the pinned IP
    with pytest.raises(CapabilityDenied, match="certificate") as exc:  # same IP, name not on the cert
        dock.call(c, "tls", "exchange", {"host": "other.test", "port": port, "data": b"hi", "timeout": 5})
    assert exc.value.reason == "tls-verify"


def test_https_fetch_verifies_the_name(dock, tls_cert, tmp_path):
    import ssl
    import threading
    from http.server import HTTPServer

    from wbnet_targets import _Handler

    srv = HTTPServer((PUBLIC_IP, 0), _Handler)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(*tls_cert)
    srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        got = dock.call(ctx(dock), "net", "fetch", {"url": f"https://public.test:{port}/x", "timeout": 5})
        assert got["status"] == 200
        with pytest.raises(CapabilityDenied):
            dock.call(ctx(dock), "net", "fetch", {"url": f"https://other.test:{port}/x", "timeout": 5})
    finally:
        srv.shutdown()
        srv.server_close()


def test_browse_returns_text(dock, http_target):
    got = dock.call(ctx(dock), "browse", "fetch", {"url": f"http://public.test:{http_target}/page"})
    assert got["text"] == "Title Hello & bye"


def test_verify_reports_allowed_hosts(make_runtime, make_toolkit, wbx):
    make_toolkit("good", caps="net",
                 extra={"ALLOWED_HOSTS": "https://*.example.com tcp://db.example.com:5432"})
    make_toolkit("bad", caps="net", extra={"ALLOWED_HOSTS": "https://api.*.com"})
    rt = make_runtime(plugins=["brokers-net"])
    assert "✓ allowed-hosts: 2 host rule(s)" in wbx("toolkit", "verify", "good", runtime=rt).stdout
    bad = wbx("toolkit", "verify", "bad", runtime=rt)
    assert bad.exit_code != 0 and "✗ allowed-hosts" in bad.stdout and "leading '*.'" in bad.stdout
