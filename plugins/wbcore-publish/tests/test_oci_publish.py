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


class _Recorder:
    """A registry client that keeps what it is asked to push; its pack is the runtime's own
    (wbcore-oci), run after ``before_pack`` (a writer acting the moment the pack starts)."""

    max_blob = 64 << 20

    def __init__(self, before_pack=lambda: None):
        self.before_pack = before_pack
        self.pushed: list[tuple[dict, list[bytes]]] = []

    def toolkit_layer(self, folder):
        from wbcore_oci.client import toolkit_layer

        self.before_pack()
        return toolkit_layer(folder)

    def push(self, reference, *, artifact_type, config, layers, annotations=None, env=None):
        self.pushed.append((json.loads(config[0]), [data for data, _, _ in layers]))
        desc = distribution.Descriptor.of(b"{}", distribution.MANIFEST_TYPE)
        return distribution.Pushed(reference.pinned(desc.digest), reference.tag, desc, len(layers) + 1)


def _layer_files(layer: bytes) -> dict[str, bytes]:
    import gzip
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def test_what_is_packed_is_what_was_verified(signed_tk, tmp_path):
    """A file changed after the signature was checked and before the layer is packed: what is
    published is still the signed content, never the new bytes."""
    from wbcore_publish import ocipublish

    signed = (signed_tk / "bin" / "hello.wasm").read_bytes()

    def writer():
        (signed_tk / "bin" / "hello.wasm").write_bytes(b"\0asm evil")

    client = _Recorder(writer)
    ocipublish.toolkit(client, signed_tk, "registry.example/wb/hello:1", env={})
    config, (layer,) = client.pushed[0]
    files = _layer_files(layer)
    assert files["bin/hello.wasm"] == signed
    unpacked = tmp_path / "unpacked"
    for name, data in files.items():
        (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
        (unpacked / name).write_bytes(data)
    assert signing.content_digest(unpacked) == config["digest"]  # the config names the packed content


def test_a_git_folder_is_not_published(signed_tk):
    """The signed form leaves ``.git`` out; so does the published layer."""
    from wbcore_publish import ocipublish

    (signed_tk / ".git").mkdir()
    (signed_tk / ".git" / "config").write_text("[remote]\n\turl = https://user:token@example.com/x\n")
    client = _Recorder()
    ocipublish.toolkit(client, signed_tk, "registry.example/wb/hello:1", env={})
    assert not [n for n in _layer_files(client.pushed[0][1][0]) if n.startswith(".git")]


def test_the_bundle_pushed_is_the_one_inspected(workspace, wb_home, key_a, tmp_path, monkeypatch):
    """The bundle file replaced right after it was read and checked: what is pushed is the
    checked bytes, not the file as it became."""
    from wbcore_publish import ocipublish

    b1 = tmp_path / "notes.wbundle"
    bundle.ship(workspace, b1, home=wb_home, ident=key_a)
    signed = b1.read_bytes()
    read = bundle._bundle_bytes

    def read_then_replaced(path, what):
        data = read(path, what)
        path.write_bytes(data[:-40] + b"\0" * 40)  # a writer acting right after the read
        return data

    monkeypatch.setattr(bundle, "_bundle_bytes", read_then_replaced)
    client = _Recorder()
    ocipublish.bundle(client, b1, "registry.example/wb/notes:1", env={})
    assert client.pushed[0][1] == [signed]
