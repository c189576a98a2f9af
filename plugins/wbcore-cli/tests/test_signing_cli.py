"""Whole-toolkit signatures: the canonical form (test vector), sign → verify, and every ✗ reason."""

from __future__ import annotations

import base64
import http.server
import threading
from pathlib import Path

import pytest

from wbcore_runtime.trust import did, identity, signing

SEED0 = bytes(32)
SEED1 = bytes(31) + b"\x01"

# The test vector of docs/signing.md: these exact bytes, signed with the all-zero seed.
VEC_MANIFEST = (
    "#+TITLE: Vector toolkit\n#+TOOLKIT: vec\n#+VERSION: 1.0.0\n#+STATUS: stable\n"
    "#+TAGLINE: A test vector.\n#+CAPS: net\n#+TRUST: third-party\n\n"
    "* Vector toolkit :toolkit:\n  :PROPERTIES:\n  :ID: vec\n  :STATUS: stable\n  :END:\n\nA test vector.\n"
)
VEC_OVERVIEW = "#+TITLE: vec overview\n\nWhat vec does.\n"
VEC_WASM = b"\0asm\x01\0\0\0"
VEC_CANONICAL = (
    "wbcore-toolkit-signature/1\n"
    "field AUTHOR_DID did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp\n"
    "field CAPS net\n"
    "field STATUS stable\n"
    "field TAGLINE A test vector.\n"
    "field TITLE Vector toolkit\n"
    "field TOOLKIT vec\n"
    "field TRUST third-party\n"
    "field VERSION 1.0.0\n"
    "manifest c0685bb8ca7cd6746f9af0596259852a69a270ed0af74191aacff4b93fb45d3a manifest.org\n"
    "file 93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476 bin/tool.wasm\n"
    "file 9530c1c6cbbc49350d1e54746553a3aa2451c132bd3cbc740b183e2a8843eb3f skills/overview.org\n"
)
VEC_SIGNATURE = "YDTxMmvkG-E2-lrPxheCAkGAsX8yjQrBZ4tCTulGFDxDvXiZuCnXMQrrBd9J5983Tk2H7T8O_R70MSOmuxedDw"
VEC_DIGEST = "2a09a1c80ae2f20fd660c0838681d906410d4837b744133dde63ea27c31d5ebb"


def write_vec(root: Path) -> Path:
    d = root / "vec"
    (d / "skills").mkdir(parents=True)
    (d / "bin").mkdir()
    (d / "manifest.org").write_text(VEC_MANIFEST)
    (d / "skills" / "overview.org").write_text(VEC_OVERVIEW)
    (d / "bin" / "tool.wasm").write_bytes(VEC_WASM)
    return d


@pytest.fixture
def signed_vec(tmp_path):
    d = write_vec(tmp_path)
    signing.sign(d, identity.Identity.from_seed(SEED0))
    assert signing.verify(d).ok
    return d


def _flip_one_byte(path: Path, needle: bytes) -> None:
    data = path.read_bytes()
    at = data.index(needle)
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])


# --- did:web: the same signature verifies under either DID --------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


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
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *a, **kw: _Quiet(*a, directory=str(site), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"127.0.0.1:{server.server_address[1]}"
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
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
