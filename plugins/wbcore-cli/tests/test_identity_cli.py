"""Identity: base58btc, did:key (W3C vectors), the stored key, WB_SIGNING_KEY, did:web on loopback."""

from __future__ import annotations

import http.server
import json
import os
import threading

import pytest

from wbcore_runtime.trust import did, identity
from wbcore_runtime.contract.errors import WbError

# W3C CCG did-method-key, test-vectors/ed25519-x25519.json: seed → did:key, publicKeyBase58.
W3C_VECTORS = [
    ("00" * 32, "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",
     "4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS"),
    ("00" * 31 + "01", "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG",
     "6ASf5EcmmEHTgDJ4X4ZT5vT6iHVJBXPg5AN5YoTCpGWt"),
    ("00" * 31 + "02", "did:key:z6MknGc3ocHs3zdPiJbnaaqDi58NGb4pk1Sp9WxWufuXSdxf",
     "8pM1DN3RiT8vbom5u1sNryaNT1nyL8CTTW3b5PwWXRBH"),
]
X25519_DID = "did:key:z6LShs9GGnqk85isEBzzshkuVWrVKsRp24GnDuHk8QWkARMW"  # same W3C file, key agreement key


# --- did:web ----------------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def serve(tmp_path):
    """Serve a folder on 127.0.0.1; yields (root, 'host:port')."""
    root = tmp_path / "site"
    root.mkdir()
    handler = lambda *a, **kw: _Quiet(*a, directory=str(root), **kw)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_did_web_resolves_on_loopback_only_when_asked(serve, wbx, make_runtime):
    root, host = serve
    ident = identity.Identity.from_seed(bytes(31) + b"\x07")
    did.write_document(ident, host, root / ".well-known" / "did.json")
    web = did.did_for_host(host)
    assert did.resolve_web(web, env={}, allow_http_loopback=True) == [ident.public_key]
    assert did.public_keys(web, env={did.ENV_HTTP_LOOPBACK: "1"}) == [ident.public_key]
    # Without the test override the resolver insists on https, and the SSRF guard refuses loopback.
    with pytest.raises(Exception) as info:
        did.resolve_web(web, env={}, timeout=2.0)
    assert "https://" in str(info.value) and "SSRF guard" in str(info.value)
    # With private sources allowed it gets past the guard and fails at TLS (this server speaks http)
    with pytest.raises(WbError) as info:
        did.resolve_web(web, env={"WB_ALLOW_PRIVATE_SOURCES": "1"}, timeout=2.0)
    assert info.value.name == "tls" and info.value.exit_code == 76, info.value


def test_wbx_identity_show_and_did_web(wbx, wb_home, tmp_path):
    r = wbx("identity", "show", "--json")
    assert r.exit_code == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["did"].startswith("did:key:z6Mk")
    out = tmp_path / "pub" / "did.json"
    r = wbx("identity", "did-web", "example.com", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert "https://example.com/.well-known/did.json" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["alsoKnownAs"] == [shown["did"]]
    assert os.path.exists(identity.key_path(wb_home))




