from __future__ import annotations

import base64
import http.server
import json
import threading
from pathlib import Path

import pytest
from conftest import SEED_A
from wbcore_publish import canonical, page

from wbcore_runtime.trust import did
from wbcore_runtime.contract.errors import InvalidArgs

PAGE = (b"<!doctype html>\n<html><head><title>Report</title>\n"
        b"<link rel=\"stylesheet\" href=\"css/site.css?v=2\">\n</head>\n<body>\n"
        b"<img src='img/chart.png' alt=chart>\n<script src=\"app.js\"></script>\n"
        b"<a href=\"https://example.com/x\">out</a> <a href=\"#top\">top</a> <a href=\"../up.html\">up</a>\n"
        b"<img src=\"missing.png\">\n</body></html>\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    d = tmp_path / "site"
    (d / "css").mkdir(parents=True)
    (d / "img").mkdir()
    (d / "css" / "site.css").write_bytes(b"body{color:#222}\n")
    (d / "img" / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (d / "app.js").write_bytes(b"console.log('hi')\n")
    (d / "data.csv").write_bytes(b"a,b\n1,2\n")
    (d / "index.html").write_bytes(PAGE)
    (tmp_path / "up.html").write_bytes(b"outside")
    return d


def _manifest(p: Path) -> dict:
    parts = page.split(p.read_bytes(), str(p))
    return canonical.parse(parts.manifest_text, "m")


def test_sign_verify_round_trip(site, key_a):
    s = page.sign(site / "index.html", key_a, assets=["data.csv"])
    assert s.assets == ("app.js", "css/site.css", "data.csv", "img/chart.png")
    assert set(s.skipped) == {"missing.png"}  # ../up.html and remote links are not local assets
    r = page.verify(site / "index.html")
    assert (r.signature, r.asset_integrity, r.valid) == (True, True, True)
    assert r.signer == key_a.did
    signed = (site / "index.html").read_bytes()
    # One element, just before </head>; cutting it out gives back the page as it was.
    assert signed.count(page.OPEN) == 1 and signed.index(page.OPEN) == PAGE.index(b"</head>")
    assert page.split(signed, "p").body == PAGE
    assert _manifest(site / "index.html")["page"]["sha256"] == __import__("hashlib").sha256(PAGE).hexdigest()
    # Signing again replaces the element rather than adding a second one.
    page.sign(site / "index.html", key_a)
    assert (site / "index.html").read_bytes().count(page.OPEN) == 1 and page.verify(site / "index.html").valid


def test_one_changed_asset_byte_fails_asset_integrity_without_any_key(site, key_a):
    page.sign(site / "index.html", key_a)
    png = bytearray((site / "img" / "chart.png").read_bytes())
    png[-1] ^= 1
    (site / "img" / "chart.png").write_bytes(bytes(png))
    p = site / "index.html"
    parts = page.split(p.read_bytes(), str(p))
    # The integrity question is answered from the page, the files and the manifest alone: no key.
    changes = page.integrity(site, parts, canonical.parse(parts.manifest_text, "m"), str(p))
    assert changes == [changes[0]] and changes[0].startswith("asset img/chart.png changed")
    r = page.verify(p, resolve_web=False)
    assert r.asset_integrity is False and r.signature is True and r.valid is False


def test_a_changed_page_byte_fails_asset_integrity(site, key_a):
    page.sign(site / "index.html", key_a)
    p = site / "index.html"
    p.write_bytes(p.read_bytes().replace(b"Report", b"Rep0rt"))
    r = page.verify(p)
    assert not r.asset_integrity and "the page changed" in r.changes[0]


def test_a_wrong_key_fails_signature(site, key_a, key_b):
    p = site / "index.html"
    page.sign(p, key_a)
    m = _manifest(p)
    # Re-signed by another identity while still claiming the first one's DID.
    forged = {**m, "signature": canonical.encode_signature(key_b.sign(canonical.canonical(m)))}
    body = page.split(p.read_bytes(), str(p)).body
    at = body.index(b"</head>")
    p.write_bytes(body[:at] + page.embed(forged) + body[at:])
    r = page.verify(p)
    assert r.signature is False and r.asset_integrity is True and r.valid is False
    assert "does not verify under the key of " + key_a.did in r.signature_reason
    # And a manifest edited after signing fails the same way.
    edited = {**m, "signed_at": "2030-01-01T00:00:00Z"}
    p.write_bytes(body[:at] + page.embed(edited) + body[at:])
    assert page.verify(p).signature is False


def test_sign_refuses_a_did_key_of_another_key(site, key_a, key_b):
    with pytest.raises(InvalidArgs, match="is not the did:key of the signing key"):
        canonical.sign({"signer": key_b.did}, key_a)


def test_a_second_element_or_a_hand_written_one_is_refused(site, key_a):
    p = site / "index.html"
    page.sign(p, key_a)
    signed = p.read_bytes()
    p.write_bytes(signed + b'<script type="application/json" id="wb-c2pa-manifest">{}</script>\n')
    r = page.verify(p)
    assert not r.valid and "2 wb-c2pa-manifest elements" in r.signature_reason
    # An extra attribute in the element would be bytes nobody signed: refused.
    p.write_bytes(signed.replace(b'id="wb-c2pa-manifest">', b'id="wb-c2pa-manifest" onload="x()">'))
    assert not page.verify(p).valid
    # So is JSON re-formatted inside the element (same meaning, other bytes).
    text = signed.split(page.OPEN, 1)[1].split(b"</script>", 1)[0]
    p.write_bytes(signed.replace(text, json.dumps(json.loads(text), indent=1).encode()))
    r = page.verify(p)
    assert not r.valid and "canonical form" in r.signature_reason


def test_an_asset_replaced_by_a_link_outside_fails(site, key_a, tmp_path):
    p = site / "index.html"
    page.sign(p, key_a)
    (tmp_path / "secret.txt").write_bytes(b"body{color:#222}\n")
    (site / "css" / "site.css").unlink()
    (site / "css" / "site.css").symlink_to(tmp_path / "secret.txt")
    r = page.verify(p)
    assert not r.asset_integrity and any("css/site.css unreadable" in c for c in r.changes)


def test_a_manifest_lt_is_escaped_so_it_cannot_close_the_script(tmp_path, key_a):
    d = tmp_path / "s"
    d.mkdir()
    (d / "<").mkdir()
    (d / "<" / "script><b>.css").write_bytes(b"x")  # the asset path reads "</script><b>.css"
    (d / "p.html").write_bytes(b"<html><head></head><body><link "
                               b"href=\"&lt;/script&gt;&lt;b&gt;.css\"></body></html>")
    assert page.sign(d / "p.html", key_a).assets == ("</script><b>.css",)
    raw = (d / "p.html").read_bytes()
    assert raw.count(b"</script>") == 1 and b"\\u003c/script>" in raw
    assert page.verify(d / "p.html").valid


def test_unsigned_page_is_not_valid(site):
    r = page.verify(site / "index.html")
    assert not r.valid and "unsigned" in r.signature_reason


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_did_web_signer_verified_through_a_loopback_document(site, key_a, key_b, tmp_path):
    root = tmp_path / "didroot"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *a, **kw: _Quiet(*a, directory=str(root), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"127.0.0.1:{server.server_address[1]}"
        did.write_document(key_a, host, root / ".well-known" / "did.json")
        p = site / "index.html"
        s = page.sign(p, key_a, did_web_host=host)
        assert s.signer == did.did_for_host(host)
        env = {did.ENV_HTTP_LOOPBACK: "1"}
        r = page.verify(p, env=env)
        assert r.valid and r.signer == s.signer, r.signature_reason
        # Offline: the asset half still answers, the signature is not passed unresolved.
        r = page.verify(p, env=env, resolve_web=False)
        assert r.asset_integrity and not r.signature and "not resolved" in r.signature_reason
        # The document now publishes another key: the same page fails its signature.
        did.write_document(key_b, host, root / ".well-known" / "did.json")
        r = page.verify(p, env=env)
        assert not r.signature and r.asset_integrity
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_did_web_without_the_loopback_switch_is_not_fetched_over_http(site, key_a):
    p = site / "index.html"
    page.sign(p, key_a, did_web_host="127.0.0.1:9")
    r = page.verify(p, env={})
    assert not r.signature and "cannot get the key" in r.signature_reason


def test_cli_sign_and_verify_json(site, wbx, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED_A).decode())
    r = wbx("publish", "sign", str(site / "index.html"), "--asset", "data.csv")
    assert r.exit_code == 0, r.stderr
    assert "not covered: missing.png" in r.stdout
    r = wbx("publish", "verify", str(site / "index.html"), "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["signature"], out["asset_integrity"], out["valid"]) == (True, True, True)
    (site / "data.csv").write_bytes(b"a,b\n1,3\n")
    r = wbx("publish", "verify", str(site / "index.html"), "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and out["asset_integrity"] is False and out["signature"] is True
    assert out["changes"] == [c for c in out["changes"] if "data.csv" in c]
    r = wbx("publish", "sign", str(site / "index.html"), "--asset", "../up.html")
    assert r.exit_code != 0 and "outside the page's folder" in r.stderr


def test_canonical_json_vector_and_refusals():
    from wbcore_runtime.contract.errors import InvalidArgs as _IA

    obj = {"signature": "ignored", "b": [1, True, None], "a": "é<\U0001F600", "A": {"z": 0, "y": ""}}
    assert canonical.canonical(obj) == b'{"A":{"y":"","z":0},"a":"\\u00e9<\\ud83d\\ude00","b":[1,true,null]}'
    with pytest.raises(_IA, match="floats are not allowed"):
        canonical.parse(b'{"a": 1.5}', "m")
    with pytest.raises(_IA, match="appears twice"):
        canonical.parse(b'{"a": 1, "a": 2}', "m")
    with pytest.raises(_IA, match="floats"):
        canonical.parse(b'{"a": NaN}', "m")


def test_a_moved_element_fails_asset_integrity(site, key_a):
    p = site / "index.html"
    page.sign(p, key_a)
    signed = p.read_bytes()
    element = signed[signed.index(page.OPEN):signed.index(b"</script>\n") + len(b"</script>\n")]
    body = signed.replace(element, b"")
    # The same element, now inside an attribute: the body without it is unchanged, the rendering is not.
    at = body.index(b"alt=chart") + len(b"alt=")
    p.write_bytes(body[:at] + element + body[at:])
    r = page.verify(p)
    assert not r.asset_integrity and "the manifest element moved" in r.changes[0]


def test_a_manifest_with_an_integer_past_pythons_digit_limit_is_refused_not_a_crash(site, key_a):
    """A page anyone may have planted where the library looks: an integer of 5000 digits makes
    Python's JSON reader raise a bare ValueError; it must be a refusal like any bad manifest."""
    p = site / "index.html"
    page.sign(p, key_a)
    signed = p.read_bytes()
    p.write_bytes(signed.replace(b'"format":', b'"n":' + b"9" * 5000 + b',"format":', 1))
    with pytest.raises(InvalidArgs, match="not valid JSON"):
        _manifest(p)
    r = page.verify(p)
    assert not r.valid and "not valid JSON" in r.signature_reason
