"""``wbx publish oci``: publish from one home, install on a second, through a loopback registry."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import SEED_A, vfs_rows
from wbcore_publish import bundle

from wbcore_runtime.trust import identity, signing
from wbcore_runtime.contract import distribution
from wbcore_testing.fixtures import write_toolkit


@pytest.fixture
def allowed(oci_registry, monkeypatch):
    """Loopback allowed explicitly: plain http for this registry, private address for this host."""
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", oci_registry.host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    monkeypatch.delenv("WB_ALLOW_PRIVATE_SOURCES", raising=False)
    return oci_registry


@pytest.fixture
def signed_tk(toolkit_root, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(SEED_A).decode())
    d = write_toolkit(toolkit_root, "hello", trust="third-party", caps="vfs",
                      files={"bin/hello.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(d, identity.Identity.from_seed(SEED_A))
    return d


def test_publish_on_one_home_install_on_another(allowed, signed_tk, wbx, make_runtime, tmp_path, wb_home):
    ref = f"{allowed.host}/wb/hello:0.1.0"
    r = wbx("publish", "oci", "hello", ref, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["kind"] == "toolkit" and out["blobs_sent"] == 2
            and out["reference"].endswith("@" + out["digest"]))
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    rt_b = make_runtime(home=home_b, roots=[])
    r = wbx("toolkit", "install", f"oci://{ref}", runtime=rt_b)
    assert r.exit_code == 0, r.stderr
    assert "installed hello 0.1.0 (third-party, signed by did:key:" in r.stdout
    installed = home_b / "toolkits" / "hello"
    assert signing.content_digest(installed) == signing.content_digest(signed_tk)
    assert signing.verify(installed).ok
    lock = json.loads((home_b / "wbx.lock").read_text())["toolkits"]["hello"]
    assert lock["source"] == out["reference"]
    assert not (wb_home / "toolkits" / "hello").exists()  # home A published; it installed nothing
    home_c = tmp_path / "home-c"
    home_c.mkdir()
    # pinned by digest
    r = wbx("toolkit", "install", out["reference"], runtime=make_runtime(home=home_c, roots=[]))
    assert r.exit_code == 0, r.stderr
    assert signing.content_digest(home_c / "toolkits" / "hello") == signing.content_digest(signed_tk)
    # the same content publishes to the same digest, and sends nothing new
    again = json.loads(wbx("publish", "oci", str(signed_tk), ref, "--json").stdout)
    assert again["digest"] == out["digest"] and again["blobs_sent"] == 0


def test_the_guard_refuses_loopback_unless_allowed(oci_registry, signed_tk, wbx, monkeypatch):
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", oci_registry.host)
    monkeypatch.delenv("WB_ALLOW_PRIVATE_HOSTS", raising=False)
    monkeypatch.delenv("WB_ALLOW_PRIVATE_SOURCES", raising=False)
    r = wbx("publish", "oci", "hello", f"{oci_registry.host}/wb/hello:0.1.0")
    assert r.exit_code == 126 and "SSRF guard" in r.stderr and "loopback" in r.stderr, r.stderr
    # the setting that applies
    assert "WB_ALLOW_PRIVATE_HOSTS" in r.stderr and "WB_NET_ALLOW_PRIVATE_HOSTS" not in r.stderr
    r = wbx("toolkit", "install", f"oci://{oci_registry.host}/wb/hello:0.1.0")
    assert r.exit_code == 126 and "SSRF guard" in r.stderr, r.stderr
    assert list(oci_registry.storage.rglob("data")) == []  # nothing reached the registry


def test_an_unsigned_toolkit_is_not_published(allowed, toolkit_root, wbx):
    write_toolkit(toolkit_root, "bare", trust="third-party")
    r = wbx("publish", "oci", "bare", f"{allowed.host}/wb/bare:1")
    assert r.exit_code == 2 and "signature missing" in r.stderr and "sign it first" in r.stderr, r.stderr
    assert list(allowed.storage.rglob("data")) == []
    # A first-party toolkit cannot be signed (wbx toolkit sign refuses it): the message says what works.
    write_toolkit(toolkit_root, "mine", trust="first-party")
    r = wbx("publish", "oci", "mine", f"{allowed.host}/wb/mine:1")
    assert (r.exit_code == 2 and "set #+TRUST: third-party" in r.stderr
            and "wbx toolkit sign mine" in r.stderr), r.stderr
    assert wbx("toolkit", "sign", "mine").exit_code != 0  # the advice is not "sign it" alone: sign refuses
    assert list(allowed.storage.rglob("data")) == []


def test_a_tampered_layer_is_refused_on_install(allowed, signed_tk, wbx, make_runtime, tmp_path):
    ref = f"{allowed.host}/wb/hello:0.1.0"
    assert wbx("publish", "oci", "hello", ref).exit_code == 0
    layer = distribution.service(make_runtime()).toolkit_layer(signed_tk)  # the runtime's client (wbcore-oci)
    blob = allowed.blob_path(distribution.Descriptor.of(layer, distribution.TOOLKIT_LAYER).digest)
    data = bytearray(blob.read_bytes())
    data[-5] ^= 0x01
    blob.write_bytes(bytes(data))
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    r = wbx("toolkit", "install", f"oci://{ref}", runtime=make_runtime(home=home_b, roots=[]))
    assert r.exit_code == 2 and "tampered or corrupt, refused" in r.stderr, r.stderr
    assert not (home_b / "toolkits").exists() or not list((home_b / "toolkits").iterdir())
    assert not (home_b / "wbx.lock").exists()


def test_a_bundle_travels_through_the_registry(allowed, workspace, wb_home, key_a, wbx, make_runtime,
                                               tmp_path):
    b1 = tmp_path / "notes.wbundle"
    bundle.ship(workspace, b1, home=wb_home, ident=key_a)
    ref = f"{allowed.host}/wb/notes:v1"
    r = wbx("publish", "oci", str(b1), ref, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kind"] == "bundle" and out["name"] == "notes"
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    into = tmp_path / "elsewhere" / "notes"
    r = wbx("bundle", "restore", out["reference"], "--into", str(into), "--signer", key_a.did,
            runtime=make_runtime(home=home_b, roots=[]))
    assert r.exit_code == 0, r.stderr
    assert vfs_rows(home_b / "vfs" / "notes-1.db") == vfs_rows(wb_home / "vfs" / "notes-1.db")
    assert (into / "notes.html").read_bytes() == (workspace / "notes.html").read_bytes()
    assert not [p for p in (home_b / ".staging").rglob("*") if p.is_file()]  # the pulled copy is gone


def test_publish_refuses_a_digest_target(allowed, signed_tk, wbx):
    r = wbx("publish", "oci", "hello", f"{allowed.host}/wb/hello@sha256:{'0' * 64}")
    assert r.exit_code == 2 and "publish to <registry>/<repo>:<tag>" in r.stderr, r.stderr
