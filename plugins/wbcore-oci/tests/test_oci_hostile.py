"""A hostile OCI registry (issue 22's red-team list): an index with many platforms, a manifest
with too many layers, a blob that keeps growing past its descriptor, a blob redirected to a
host the deployer did not allow, and a toolkit layer that is an archive bomb. Each is refused
with a message that says what, and nothing lands. The registry is scripted here (test
support): a real one would never serve these."""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from wbcore_install import install
from wbcore_oci import client as oci
from wbcore_oci import skill_images
from wbcore_runtime.contract.distribution import SkillImage
from wbcore_runtime.guard.netguard import EgressDenied
from wbcore_runtime.guard.unpack import UnsafeArchive
from wbcore_runtime.store import skill_images as store_images

from oci_scripted import ScriptedHandler


class Hostile:
    """Serves one manifest under any tag and blobs by digest; ``grow`` names a blob streamed
    without end, ``redirect`` a blob answered with a 307 to another origin."""

    def __init__(self) -> None:
        self.manifest = b""
        self.manifest_type = oci.MANIFEST_TYPE
        self.blobs: dict[str, bytes] = {}
        self.grow: set[str] = set()
        self.redirect: dict[str, str] = {}
        self.blob_gets: list[str] = []
        self.streamed = 0
        fake = self

        class Handler(ScriptedHandler):
            def do_GET(self) -> None:
                if self.path == "/v2/":
                    self._reply(200, b"{}")
                elif "/manifests/" in self.path:
                    self._reply(200, fake.manifest, (("Content-Type", fake.manifest_type),))
                elif "/blobs/" in self.path:
                    digest = self.path.rsplit("/", 1)[-1]
                    fake.blob_gets.append(digest)
                    if digest in fake.redirect:
                        self._reply(307, b"", (("Location", fake.redirect[digest]),))
                    elif digest in fake.grow:
                        self.send_response(200)
                        self.end_headers()  # no length: it just keeps coming
                        try:
                            for _ in range(64 << 10):  # at most 1 GiB, in 16 KiB chunks
                                self.wfile.write(b"\0" * (16 << 10))
                                fake.streamed += 16 << 10
                        except OSError:
                            pass  # the client hung up: what we want
                    else:
                        self._reply(200, fake.blobs[digest])
                else:
                    self._reply(404)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def put(self, data: bytes, media_type: str) -> oci.Descriptor:
        d = oci.Descriptor.of(data, media_type)
        self.blobs[d.digest] = data
        return d

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    reg = Hostile()
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", reg.host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    yield reg
    reg.close()


def _toolkit_manifest(reg: Hostile, layers: list[oci.Descriptor]) -> bytes:
    cfg = reg.put(b"{}", oci.TOOLKIT_CONFIG)
    return oci.manifest_bytes(artifact_type=oci.TOOLKIT_TYPE, config=cfg, layers=layers)


def test_an_index_of_many_platforms_is_refused_without_fetching_them(hostile: Hostile,
                                                                     tmp_path: Path) -> None:
    entries = [{"mediaType": oci.MANIFEST_TYPE, "digest": "sha256:" + f"{i:064x}", "size": 500,
                "platform": {"architecture": f"arch{i}", "os": "linux"}} for i in range(5000)]
    hostile.manifest_type = "application/vnd.oci.image.index.v1+json"
    hostile.manifest = json.dumps({"schemaVersion": 2, "mediaType": hostile.manifest_type,
                                   "manifests": entries}).encode()
    with pytest.raises(oci.OciError, match="an index or a Docker image is not a wbcore artifact"):
        oci.pull(f"oci://{hostile.host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))
    assert hostile.blob_gets == []


def test_too_many_layers_are_refused_before_any_blob(hostile: Hostile, tmp_path: Path) -> None:
    layers = [hostile.put(bytes([i]), oci.TOOLKIT_LAYER) for i in range(oci.MAX_LAYERS + 1)]
    hostile.manifest = _toolkit_manifest(hostile, layers)
    with pytest.raises(oci.OciError, match=f"expected 1..{oci.MAX_LAYERS} layers"):
        oci.pull(f"oci://{hostile.host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))
    assert hostile.blob_gets == []


def test_a_blob_growing_past_its_descriptor_is_cut_at_its_size(hostile: Hostile, tmp_path: Path) -> None:
    layer = hostile.put(b"small layer", oci.TOOLKIT_LAYER)
    hostile.grow.add(layer.digest)
    hostile.manifest = _toolkit_manifest(hostile, [layer])
    with pytest.raises(oci.OciError, match=r"more than the 11 bytes|sent \d+ bytes"):
        oci.pull(f"oci://{hostile.host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))
    # The client stopped reading at the declared size (plus the socket's buffers), not at 1 GiB.
    assert hostile.streamed < 64 << 20, hostile.streamed
    assert not any(p.stat().st_size > layer.size for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_a_blob_redirected_to_a_host_not_allowed_is_refused(hostile: Hostile, tmp_path: Path) -> None:
    layer = hostile.put(b"layer", oci.TOOLKIT_LAYER)
    hostile.redirect[layer.digest] = "http://169.254.169.254/latest/meta-data/"  # cloud metadata
    hostile.manifest = _toolkit_manifest(hostile, [layer])
    with pytest.raises(EgressDenied, match="SSRF guard"):
        oci.pull(f"oci://{hostile.host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))


def test_a_toolkit_layer_that_is_an_archive_bomb_lands_nothing(hostile: Hostile, tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for i in range(install.TREE_CAPS.max_files + 1):  # many entries, each tiny: a file-count bomb
            info = tarfile.TarInfo(f"tk/f{i}")
            info.size = 0
            tf.addfile(info, io.BytesIO(b""))
    layer = hostile.put(gzip.compress(raw.getvalue(), mtime=0), oci.TOOLKIT_LAYER)
    hostile.manifest = _toolkit_manifest(hostile, [layer])
    home = tmp_path / "home"
    with pytest.raises(Exception, match=r"files|entries"):
        install.install(home, f"oci://{hostile.host}/wb/bomb:1", distribution=oci.OciDistribution)
    landed = home / "toolkits"
    assert not landed.exists() or not any(landed.iterdir())


@contextlib.contextmanager
def _plain_registry(handler: type[http.server.BaseHTTPRequestHandler],
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``handler`` served on loopback as a plain-HTTP registry the client may reach; its host."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()


def _tar_layer(entries: list[tuple[str, str, bytes]]) -> bytes:
    """A tar+gzip layer of ``(kind, name, data)`` entries: kind "dir", "file" or "link" (data: target)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for kind, name, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
            else:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def _skill_image(reg: Hostile, layers: list[bytes]) -> None:
    descs = [reg.put(data, skill_images.LAYER_TYPES[0]) for data in layers]
    reg.manifest = oci.manifest_bytes(artifact_type=skill_images.IMAGE_CONFIG,
                                      config=reg.put(b"{}", skill_images.IMAGE_CONFIG), layers=descs)


def test_a_skill_image_layer_never_makes_a_folder_outside_its_tree(hostile: Hostile, tmp_path: Path) -> None:
    # Links each lexically inside the tree, that chained climb out of it: ``c`` resolves to the
    # image cache itself, where a folder named after another image's digest would be taken for
    # that image's (pinned, verified) tree.
    victim = "sha256:" + "ab" * 32
    _skill_image(hostile, [_tar_layer([("link", "a", b"."), ("link", "a/b", b".."), ("link", "c", b"b/.."),
                                       ("dir", f"c/{victim.replace(':', '-')}/tree/bin", b"")])])
    home = tmp_path / "home"
    with pytest.raises(UnsafeArchive, match="outside the tree|escapes the tree"):
        oci.OciDistribution().skill_image(home, SkillImage(f"oci://{hostile.host}/wb/skill:1", "/skills/x"))
    cache = store_images.cache_root(home)
    assert sorted(p.name for p in cache.iterdir()) == [".lock"]
    assert store_images.cached(home, SkillImage(f"oci://{hostile.host}/wb/skill@{victim}", "/s")) is None


def test_a_skill_image_caps_its_whole_tree_not_each_layer(hostile: Hostile, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skill_images, "MAX_BYTES", 1000)
    # each layer under the image's cap, the tree they make together over it
    _skill_image(hostile, [_tar_layer([("file", f"part{i}", bytes([i]) * 600)]) for i in range(2)])
    home = tmp_path / "home"
    with pytest.raises(UnsafeArchive, match="more than 1000 bytes"):
        oci.OciDistribution().skill_image(home, SkillImage(f"oci://{hostile.host}/wb/skill:1", "/skills/x"))
    assert sorted(p.name for p in store_images.cache_root(home).iterdir()) == [".lock"]


@pytest.mark.parametrize("location", ["/v2/wb/b/blobs/uploads/u1?_state=SECRET-STATE",
                                      "http://storage.example/up/u1?X-Amz-Signature=SECRET-STATE"])
def test_a_refused_upload_never_shows_its_location_query(location: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The upload's Location carries the registry's session state (or a presigned link's
    # signature) in its query: a 401 after the anonymous token, and a Location on another host,
    # named it whole.
    class Registry(ScriptedHandler):
        def do_HEAD(self) -> None:
            if self.headers.get("Authorization") != "Bearer anon-token":
                self._reply(401, b"", [("WWW-Authenticate", f'Bearer realm="http://{host}/token"')])
            else:
                self._reply(404)

        def do_GET(self) -> None:
            self._reply(200, b'{"token": "anon-token"}')

        def do_POST(self) -> None:
            self._reply(202, b"", [("Location", location)])

        def do_PUT(self) -> None:
            self._reply(401, b"", [("WWW-Authenticate", f'Bearer realm="http://{host}/token"')])

    with _plain_registry(Registry, monkeypatch) as host:
        with pytest.raises(oci.OciError, match="wants credentials|points at another host") as err:
            oci.push(f"oci://{host}/wb/b:1", artifact_type=oci.BUNDLE_TYPE, config=(b"{}", oci.BUNDLE_CONFIG),
                     layers=[(b"payload", oci.BUNDLE_LAYER, {})])
        assert "SECRET-STATE" not in err.value.message and "/u1" in err.value.message


def test_a_manifest_nested_without_end_is_refused_as_not_a_manifest(hostile: Hostile, tmp_path: Path) -> None:
    hostile.manifest = b"[" * 100_000  # 100 KB, far under the manifest cap; json.loads recursed on it
    with pytest.raises(oci.OciError, match="manifest nests .* levels deep"):
        oci.pull(f"oci://{hostile.host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))
    assert hostile.blob_gets == []


@pytest.mark.parametrize("answer", [b'{"token": "TOKEN-s3cr3t\\n"}', b"[" * 60_000])
def test_a_token_service_answer_that_is_no_token_is_refused_without_echoing_it(
        answer: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a line feed ended the token's pattern; the header it made was refused by the HTTP library
    # in a message that printed it ("cannot connect … Illegal header value b'Bearer …'")
    class Registry(ScriptedHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/token"):
                self._reply(200, answer)
            else:
                self._reply(401, b"", [("WWW-Authenticate", f'Bearer realm="http://{host}/token"')])

    with _plain_registry(Registry, monkeypatch) as host:
        with pytest.raises(oci.OciError, match="the token service") as err:
            oci.pull(f"oci://{host}/wb/x:1", tmp_path / "out", artifact_types=(oci.TOOLKIT_TYPE,))
        assert "s3cr3t" not in err.value.message
