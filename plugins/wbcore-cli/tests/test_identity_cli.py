"""Identity through ``wbx``: did:web on loopback resolved only when asked, ``wbx identity``."""

from __future__ import annotations

import json
import os

import pytest

from wbcore_runtime.trust import did, identity
from wbcore_runtime.contract.errors import WbError

# --- did:web ----------------------------------------------------------------------------


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




