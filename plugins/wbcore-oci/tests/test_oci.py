"""The OCI distribution client against a real registry (Debian's docker-registry) on loopback."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from wbcore_runtime.trust import identity, signing
from wbcore_install import install
from wbcore_oci import client as oci
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.guard.netguard import EgressDenied
from wbcore_testing.fixtures import write_toolkit

from oci_scripted import ScriptedHandler

SEED0 = base64.b64encode(bytes(32)).decode()


def test_toolkit_layer_is_deterministic(tmp_path):
    a = write_toolkit(tmp_path / "a", "tk", files={"bin/x": b"1"})
    b = write_toolkit(tmp_path / "b", "tk", files={"bin/x": b"1"})
    import os

    os.utime(b / "manifest.org", (1, 1))
    assert oci.toolkit_layer(a) == oci.toolkit_layer(b)
    (b / "bin" / "link").symlink_to("x")
    with pytest.raises(InvalidArgs, match="link or special file"):
        oci.toolkit_layer(b)


def _allow(monkeypatch, reg):
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", reg.host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")


def test_push_pull_round_trip_and_loopback_needs_an_explicit_allowance(oci_registry, monkeypatch, tmp_path):
    monkeypatch.delenv("WB_ALLOW_PRIVATE_SOURCES", raising=False)
    monkeypatch.delenv("WB_ALLOW_PRIVATE_HOSTS", raising=False)
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", oci_registry.host)
    ref = f"oci://{oci_registry.host}/wb/blob:1"
    args = {"artifact_type": oci.BUNDLE_TYPE, "config": (b"{}", oci.BUNDLE_CONFIG),
            "layers": [(b"payload", oci.BUNDLE_LAYER, {})]}
    with pytest.raises(EgressDenied, match="SSRF guard"):
        oci.push(ref, **args)
    _allow(monkeypatch, oci_registry)
    pushed = oci.push(ref, **args)
    assert (pushed.blobs_sent == 2 and pushed.reference.digest
            and pushed.reference.digest.startswith("sha256:"))
    again = oci.push(ref, **args)
    assert again.blobs_sent == 0 and again.reference == pushed.reference  # same content, same digest
    got = oci.pull(pushed.reference, tmp_path / "out", artifact_types=(oci.BUNDLE_TYPE,))
    assert got.layers[0][1].read_bytes() == b"payload" and got.config == b"{}"
    by_tag = oci.pull(ref, tmp_path / "out2", artifact_types=(oci.BUNDLE_TYPE,))
    assert by_tag.reference == pushed.reference
    with pytest.raises(oci.OciError, match="artifact type"):
        oci.pull(ref, tmp_path / "out3", artifact_types=(oci.TOOLKIT_TYPE,))
    with pytest.raises(NotFound):  # a digest the registry does not hold
        oci.pull(pushed.reference.pinned("sha256:" + "0" * 64), tmp_path / "out4",
                 artifact_types=(oci.BUNDLE_TYPE,))


@pytest.fixture
def signed(tmp_path, monkeypatch):
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    d = write_toolkit(tmp_path / "src", "tp", trust="third-party", caps="net",
                      files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(d, identity.Identity.from_seed(bytes(32)))
    return d


def _push_toolkit(reg, folder: Path, tag: str = "0.1.0") -> oci.Pushed:
    return oci.push(f"oci://{reg.host}/wb/tp:{tag}", artifact_type=oci.TOOLKIT_TYPE,
                    config=(json.dumps({"id": "tp"}).encode(), oci.TOOLKIT_CONFIG),
                    layers=[(oci.toolkit_layer(folder), oci.TOOLKIT_LAYER, {})])


def test_install_from_oci_pins_the_manifest_digest(oci_registry, signed, monkeypatch, wbx, wb_home):
    _allow(monkeypatch, oci_registry)
    pushed = _push_toolkit(oci_registry, signed)
    r = wbx("toolkit", "install", f"oci://{oci_registry.host}/wb/tp:0.1.0")
    assert r.exit_code == 0, r.stderr
    lock = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]["tp"]
    assert lock["source"] == pushed.reference.text() and "@sha256:" in lock["source"]
    assert signing.content_digest(wb_home / "toolkits" / "tp") == signing.content_digest(signed)
    # --locked refetches by the digest and finds the same bytes
    assert install.install_locked(wb_home, distribution=oci.OciDistribution)[0].unchanged


def test_a_tampered_blob_is_refused_and_nothing_lands(oci_registry, signed, monkeypatch, wbx, wb_home):
    _allow(monkeypatch, oci_registry)
    _push_toolkit(oci_registry, signed)
    layer = oci.toolkit_layer(signed)
    blob = oci_registry.blob_path(oci.Descriptor.of(layer, oci.TOOLKIT_LAYER).digest)
    evil = bytearray(blob.read_bytes())
    evil[len(evil) // 2] ^= 0xFF  # same size, other bytes
    blob.write_bytes(bytes(evil))
    r = wbx("toolkit", "install", f"oci://{oci_registry.host}/wb/tp:0.1.0")
    assert r.exit_code == 2 and "tampered or corrupt, refused" in r.stderr, r.stderr
    assert not (wb_home / "toolkits" / "tp").exists() and not (wb_home / "wbx.lock").exists()
    blob.write_bytes(bytes(evil) + b"more")  # longer than declared: stopped at the declared size
    r = wbx("toolkit", "install", f"oci://{oci_registry.host}/wb/tp:0.1.0")
    assert r.exit_code == 2 and "more than the" in r.stderr, r.stderr
    assert not (wb_home / "toolkits" / "tp").exists() and not (wb_home / "wbx.lock").exists()


def test_an_unsigned_toolkit_from_oci_is_refused(oci_registry, tmp_path, monkeypatch, wbx, wb_home):
    _allow(monkeypatch, oci_registry)
    d = write_toolkit(tmp_path / "src", "tp", trust="third-party")
    _push_toolkit(oci_registry, d)
    r = wbx("toolkit", "install", f"oci://{oci_registry.host}/wb/tp:0.1.0")
    assert r.exit_code == 2 and "signature missing" in r.stderr, r.stderr
    assert not (wb_home / "toolkits" / "tp").exists()


def test_a_manifest_that_does_not_hash_to_the_pinned_digest_is_refused(oci_registry, monkeypatch, tmp_path):
    _allow(monkeypatch, oci_registry)
    ref = f"oci://{oci_registry.host}/wb/blob:1"
    pushed = oci.push(ref, artifact_type=oci.BUNDLE_TYPE, config=(b"{}", oci.BUNDLE_CONFIG),
                      layers=[(b"payload", oci.BUNDLE_LAYER, {})], annotations={"note": "aaaa"})
    stored = oci_registry.blob_path(pushed.manifest.digest)
    stored.write_bytes(stored.read_bytes().replace(b"aaaa", b"bbbb"))  # same size, other bytes
    with pytest.raises(oci.OciError, match="not the pinned digest; refused"):
        oci.pull(pushed.reference, tmp_path / "out", artifact_types=(oci.BUNDLE_TYPE,))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_body_is_never_resent_through_a_redirect(monkeypatch, tmp_path):
    import http.server
    import threading

    from wbcore_runtime.guard import fetch
    from wbcore_runtime.guard.netguard import NetGuard

    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_PUT(self):
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(InvalidArgs, match="redirect of a PUT with a body; not followed"):
            fetch.get_bytes(f"http://127.0.0.1:{server.server_address[1]}/x",
                            guard=NetGuard(allow_private=True),
                            limits=fetch.FetchLimits(max_bytes=1024, timeout=5), method="PUT", body=b"secret",
                            ok=(201,))
    finally:
        server.shutdown()
        server.server_close()


class _Fake:
    """A registry that wants an anonymous bearer token and keeps its blobs on another origin."""

    def __init__(self):
        import http.server
        import threading

        self.token_queries: list[str] = []
        self.storage_auth: list[str | None] = []
        self.blobs: dict[str, bytes] = {}
        self.manifest = b""
        fake = self

        class Storage(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                fake.storage_auth.append(self.headers.get("Authorization"))
                data = fake.blobs[self.path.rsplit("/", 1)[-1]]
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Registry(ScriptedHandler):
            def do_GET(self):
                if self.path.startswith("/token"):
                    fake.token_queries.append(self.path)
                    self._reply(200, b'{"token": "TOKEN-s3cr3t-77"}')
                    return
                if self.headers.get("Authorization") != "Bearer TOKEN-s3cr3t-77":
                    realm = f"http://127.0.0.1:{fake.port}/token"
                    self._reply(401, b"{}", [(
                        "WWW-Authenticate",
                        f'Bearer realm="{realm}",service="fake",scope="repository:wb/b:pull"')])
                    return
                if "/manifests/" in self.path:
                    self._reply(200, fake.manifest, [("Content-Type", oci.MANIFEST_TYPE)])
                    return
                digest = self.path.rsplit("/", 1)[-1]
                self._reply(307, b"", [("Location", f"http://127.0.0.1:{fake.storage_port}/blobs/{digest}")])

        self.servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (Registry, Storage)]
        for srv in self.servers:
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.port = self.servers[0].server_address[1]
        self.storage_port = self.servers[1].server_address[1]

    def close(self):
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()


def test_an_anonymous_token_is_fetched_and_never_follows_a_redirect_elsewhere(monkeypatch, tmp_path):
    fake = _Fake()
    try:
        cfg, layer = b"{}", b"payload"
        for data in (cfg, layer):
            fake.blobs[oci.Descriptor.of(data, "x").digest] = data
        fake.manifest = oci.manifest_bytes(artifact_type=oci.BUNDLE_TYPE,
                                           config=oci.Descriptor.of(cfg, oci.BUNDLE_CONFIG),
                                           layers=[oci.Descriptor.of(layer, oci.BUNDLE_LAYER)])
        monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
        monkeypatch.setenv("WB_OCI_PLAIN_HTTP", f"127.0.0.1:{fake.port}")
        got = oci.pull(f"oci://127.0.0.1:{fake.port}/wb/b:1", tmp_path / "out",
                       artifact_types=(oci.BUNDLE_TYPE,))
        assert got.layers[0][1].read_bytes() == b"payload"
        assert fake.token_queries == ["/token?service=fake&scope=repository%3Awb%2Fb%3Apull"]
        assert fake.storage_auth == [None, None]  # the token stayed with the registry's origin
    finally:
        fake.close()
