"""Identity: base58btc, did:key (W3C vectors), the stored key, WB_SIGNING_KEY, did:web on loopback."""

from __future__ import annotations

import base64
import http.server
import json
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from wbcore_runtime.trust import did, identity
from wbcore_runtime.contract.errors import InvalidArgs, Unreachable

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


@pytest.mark.parametrize(
    ("raw", "text"),
    [(b"", ""), (b"\0", "1"), (b"\0\0\x01", "112"), (b"hello world", "StV1DL6CwTryKyV"),
     (bytes([0xFF] * 4), "7YXq9G")],
)
def test_base58btc_vectors(raw, text):
    assert identity.b58encode(raw) == text
    assert identity.b58decode(text) == raw


def test_base58_rejects_foreign_characters():
    for bad in ("0", "O", "I", "l", "+"):
        with pytest.raises(ValueError):
            identity.b58decode("z" + bad)


@pytest.mark.parametrize(("seed", "did_text", "pub58"), W3C_VECTORS)
def test_did_key_matches_w3c_vectors(seed, did_text, pub58):
    ident = identity.Identity.from_seed(bytes.fromhex(seed))
    assert identity.b58encode(ident.public_key) == pub58
    assert ident.did == did_text
    assert identity.public_key_from_did(did_text) == ident.public_key


def test_did_key_carries_the_ed25519_multicodec_prefix():
    did_text = W3C_VECTORS[0][1]
    raw = identity.b58decode(did_text.removeprefix("did:key:z"))
    assert raw[:2] == b"\xed\x01" and len(raw) == 34
    assert did_text.startswith("did:key:z6Mk")


def test_other_key_types_are_refused_by_name():
    with pytest.raises(identity.KeyTypeError, match=r"X25519 \(0xec\).*only Ed25519"):
        identity.public_key_from_did(X25519_DID)
    secp = "did:key:z" + identity.b58encode(b"\xe7\x01" + b"\x02" * 33)
    with pytest.raises(identity.KeyTypeError, match="secp256k1"):
        identity.public_key_from_did(secp)
    with pytest.raises(InvalidArgs, match="not a did:key"):
        identity.public_key_from_did("did:example:123")
    with pytest.raises(InvalidArgs, match="base58btc"):
        identity.public_key_from_did("did:key:m6Mk")
    short = "did:key:z" + identity.b58encode(b"\xed\x01" + b"\x01" * 31)
    with pytest.raises(InvalidArgs, match="31 key bytes"):
        identity.public_key_from_did(short)


def test_sign_and_verify_roundtrip():
    a = identity.Identity.from_seed(bytes(32))
    b = identity.Identity.from_seed(bytes(31) + b"\x01")
    sig = a.sign(b"message")
    assert identity.verify(a.did, b"message", sig)
    assert not identity.verify(b.did, b"message", sig)
    assert not identity.verify(a.did, b"messagE", sig)
    assert "seed" not in repr(a).lower() or "00" * 8 not in repr(a)


def test_stored_key_is_created_once_with_mode_0600(tmp_path):
    home = tmp_path / "home"
    first = identity.load(home, {})
    again = identity.load(home, {})
    assert first.did == again.did
    path = identity.key_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(base64.b64decode(path.read_text().strip())) == 32
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_racing_creators_end_with_one_key(tmp_path):
    home = tmp_path / "home"
    with ThreadPoolExecutor(8) as pool:
        dids = set(pool.map(lambda _: identity.load(home, {}).did, range(16)))
    assert len(dids) == 1


def test_tenants_have_separate_keys(tmp_path):
    assert identity.load(tmp_path, {}, tenant="a").did != identity.load(tmp_path, {}, tenant="b").did
    with pytest.raises(InvalidArgs, match="tenant"):
        identity.load(tmp_path, {}, tenant="../x")


def test_env_signing_key_overrides_and_is_never_written(tmp_path):
    seed = bytes(range(32))
    env = {"WB_SIGNING_KEY": base64.b64encode(seed).decode()}
    ident = identity.load(tmp_path / "home", env)
    assert ident.public_key == identity.Identity.from_seed(seed).public_key
    assert ident.source == "$WB_SIGNING_KEY"
    assert not (tmp_path / "home").exists()
    urlsafe = {"WB_SIGNING_KEY": base64.urlsafe_b64encode(seed).decode().rstrip("=")}
    assert identity.load(tmp_path / "home", urlsafe).did == ident.did


def test_bad_env_signing_key_says_why_without_echoing_it(tmp_path):
    secret = base64.b64encode(b"s3cr3t-but-too-short").decode()
    with pytest.raises(InvalidArgs) as info:
        identity.load(tmp_path, {"WB_SIGNING_KEY": secret})
    assert "32-byte" in info.value.message and secret not in info.value.message


def test_corrupt_key_file_is_reported_not_replaced(tmp_path):
    path = identity.key_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("not a key\n")
    with pytest.raises(InvalidArgs, match="not a base64 32-byte"):
        identity.load(tmp_path, {})
    assert path.read_text() == "not a key\n"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_key_path_that_is_no_regular_file_is_refused_at_once(tmp_path, kind):
    """A FIFO at the key's path (no writer ever comes) or a link to an endless device must
    not hang or fill memory: the key is refused, naming its path and what to do."""
    import os
    import threading

    path = identity.key_path(tmp_path)
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/null")  # a device (an endless one, /dev/zero, would be read forever)
    got: list = []

    def load() -> None:
        try:
            identity.load(tmp_path, {})
        except InvalidArgs as exc:
            got.append(exc.message)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive() and kind == "fifo":  # release the blocked reader so the test process can end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert got, "loading the key did not return"
    assert str(path) in got[0] and "not a regular file" in got[0] and "move it aside" in got[0]


# --- did:web ----------------------------------------------------------------------------


def test_did_web_names_and_urls():
    assert did.did_for_host("example.com") == "did:web:example.com"
    assert did.did_for_host("example.com:8443/users/alice") == "did:web:example.com%3A8443:users:alice"
    assert did.url_for("did:web:example.com") == "https://example.com/.well-known/did.json"
    assert (did.url_for("did:web:example.com%3A8443:users:alice")
            == "https://example.com:8443/users/alice/did.json")
    for bad in ("", "exa mple.com", "a.com/../x"):
        with pytest.raises(InvalidArgs):
            did.did_for_host(bad)


def test_did_web_document_wraps_the_same_key():
    ident = identity.Identity.from_seed(bytes(32))
    doc = did.document(ident, "example.com")
    assert doc["id"] == "did:web:example.com"
    assert doc["alsoKnownAs"] == [ident.did]
    assert (doc["verificationMethod"][0]["publicKeyMultibase"]
            == "z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp")
    assert did.keys_in(doc, "did:web:example.com") == [ident.public_key]
    with pytest.raises(InvalidArgs, match="names itself"):
        did.keys_in(doc, "did:web:other.example")


def test_did_web_document_size_cap_and_missing(serve):
    root, host = serve
    (root / ".well-known").mkdir()
    (root / ".well-known" / "did.json").write_text(json.dumps({"id": "x", "pad": "a" * 100_000}))
    web = did.did_for_host(host)
    # a document the fetch cannot take is unresolved (the host's side), not a malformed identity
    with pytest.raises(Unreachable, match="cap"):
        did.resolve_web(web, env={}, allow_http_loopback=True)
    with pytest.raises(Exception, match="HTTP 404"):
        did.resolve_web(did.did_for_host(host + "/nobody"), env={}, allow_http_loopback=True)


@pytest.mark.parametrize("body", [
    "[" * 30_000 + "]" * 30_000,  # inside the 64 KiB cap, deeper than Python's recursion limit
    json.dumps({"id": "@", "verificationMethod": 5}),
    json.dumps({"id": "@", "verificationMethod": True, "assertionMethod": ["#k"]}),
    '{"id": "@", "n": ' + "9" * 5000 + "}",  # past Python's int-digits limit: a ValueError
], ids=["nested", "int-methods", "bool-methods", "huge-int"])
def test_a_hostile_did_document_is_malformed_not_a_crash(serve, body):
    """The document comes from the signer's host: whatever shape it has, the answer is a
    refusal naming the document, never an exception escaping the verdict."""
    root, host = serve
    web = did.did_for_host(host)
    (root / ".well-known").mkdir()
    (root / ".well-known" / "did.json").write_text(body.replace("@", web))
    with pytest.raises(InvalidArgs, match="not a JSON DID document|verificationMethod is not a list"):
        did.resolve_web(web, env={}, allow_http_loopback=True)


def test_unknown_did_method_lists_known_ones():
    with pytest.raises(InvalidArgs, match="did:key, did:web"):
        did.public_keys("did:plc:abc")


def test_only_assertion_methods_sign():
    signer = identity.Identity.from_seed(bytes(32))
    other = identity.Identity.from_seed(bytes(31) + b"\x09")
    doc = did.document(signer, "example.com")
    extra = {"id": "did:web:example.com#auth-only", "type": "Multikey", "controller": "did:web:example.com",
             "publicKeyMultibase": identity.multibase_key(other.public_key)}
    doc["verificationMethod"].append(extra)
    assert did.keys_in(doc, "did:web:example.com") == [signer.public_key]
    doc["assertionMethod"].append("#auth-only")
    assert did.keys_in(doc, "did:web:example.com") == [signer.public_key, other.public_key]
    del doc["assertionMethod"]
    assert len(did.keys_in(doc, "did:web:example.com")) == 2


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80))
def test_base58_roundtrips_any_bytes(raw):
    assert identity.b58decode(identity.b58encode(raw)) == raw


@pytest.mark.parametrize("status", [401, 403])
def test_a_did_web_host_that_wants_credentials_is_named_as_such(status, tmp_path):
    """A did:web host answering 401/403 is reported as refusing to serve the document (and what to
    do), and a toolkit signed with it is 'unresolved' — it used to read "signature malformed"."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self.send_response(status)
            self.send_header("WWW-Authenticate", 'Basic realm="x"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        web = did.did_for_host(f"127.0.0.1:{srv.server_address[1]}")
        with pytest.raises(Unreachable,
                           match=rf"refused to serve the DID document \(HTTP {status}.*must be public"):
            did.resolve_web(web, env={}, allow_http_loopback=True)
    finally:
        srv.shutdown()
        srv.server_close()
