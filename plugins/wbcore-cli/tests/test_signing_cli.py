"""Toolkit signatures through ``wbx``: sign → verify → tamper, first-party refused, did:web end to end."""

from __future__ import annotations

import base64

from wbcore_runtime.trust import did
from wbcore_testing.loopback import serve_folder
from wbcore_testing.toolkit_sources import SEED0, VEC_WASM


# --- through wbx ----------------------------------------------------------------------


def test_wbx_sign_then_verify_then_tamper(make_toolkit, wbx, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED0).decode())
    d = make_toolkit("tp", trust="third-party", caps="net", files={"bin/tool.wasm": VEC_WASM})
    r = wbx("toolkit", "verify", "tp")
    assert r.exit_code == 1 and "✗ trust: signature missing" in r.stdout
    r = wbx("toolkit", "sign", "tp")
    assert r.exit_code == 0, r.stderr
    assert "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp" in r.stdout
    r = wbx("toolkit", "verify", "tp")
    assert r.exit_code == 0, r.stdout
    assert "✓ trust: third-party, signature valid" in r.stdout
    (d / "bin" / "tool.wasm").write_bytes(VEC_WASM + b"\0")
    r = wbx("toolkit", "verify", "tp")
    assert r.exit_code == 1
    assert ("✗ trust: signature tampered: content changed since it was signed: "
            "artifact bin/tool.wasm changed" in r.stdout)
    r = wbx("toolkit", "list")
    assert "tp · stable · Use tp for testing. · unavailable: signature:" in r.stdout


def test_wbx_sign_refuses_first_party(make_toolkit, wbx):
    make_toolkit("fp")
    r = wbx("toolkit", "sign", "fp")
    assert r.exit_code == 2 and "first-party" in r.stderr


def test_wbx_did_web_end_to_end(make_toolkit, wbx, make_runtime, monkeypatch, tmp_path):
    site = tmp_path / "site2"
    site.mkdir()
    with serve_folder(site) as host:
        monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED0).decode())
        monkeypatch.setenv(did.ENV_HTTP_LOOPBACK, "1")
        make_toolkit("webtk", trust="third-party")
        rt = make_runtime()
        r = wbx("identity", "did-web", host, "-o", str(site / ".well-known" / "did.json"), runtime=rt)
        assert r.exit_code == 0, r.stderr
        r = wbx("toolkit", "sign", "webtk", "--did-web", host, runtime=rt)
        assert r.exit_code == 0 and f"signed webtk as did:web:127.0.0.1%3A{host.split(':')[1]}" in r.stdout
        r = wbx("toolkit", "verify", "webtk", runtime=rt)
        assert r.exit_code == 0, r.stdout
        assert "✓ trust: third-party, signature valid, signed by did:web:127.0.0.1%3A" in r.stdout
        (site / ".well-known" / "did.json").unlink()
        r = wbx("toolkit", "verify", "webtk", runtime=make_runtime())
        assert r.exit_code == 1 and "✗ trust: signature unresolved" in r.stdout and "HTTP 404" in r.stdout
