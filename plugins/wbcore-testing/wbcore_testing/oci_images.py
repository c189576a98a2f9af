"""OCI images pushed to a test registry (the ``oci_registry`` fixture) as a build tool pushes
them, through the OCI distribution HTTP API directly: the pusher shares no code with the client
under test (wbcore-oci), so a fault in that client cannot hide itself in the images it pulls.

``layer(files)``       a tar+gzip layer of ``{path: bytes}``, the same bytes for the same files
``push_image(registry, repo, tag, files)``  a plain image (image config, that one layer) pushed
                       as ``repo:tag``; returns its manifest digest
``allowed_registry``   a fixture: ``oci_registry`` with the allowances a client needs to reach it
                       set; a suite imports it in its ``conftest.py``
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import urllib.request
from urllib.parse import quote, urljoin

import pytest

from wbcore_testing.fixtures import OciRegistry

# The media types of the OCI image spec, spelled out here rather than taken from the code under test.
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"

# Loopback registries only: no proxy from the environment stands between the test and its registry.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def layer(files: dict[str, bytes]) -> bytes:
    """A tar+gzip layer holding ``files`` (``*.sh`` executable), with no timestamps: the same files
    give the same bytes, so a test can compute a pushed layer's digest again."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755 if name.endswith(".sh") else 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _request(url: str, method: str, body: bytes, content_type: str, status: int) -> dict[str, str]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": content_type})
    with _OPENER.open(req, timeout=30) as resp:
        assert resp.status == status, f"{method} {url}: {resp.status}, expected {status}"
        return {k.lower(): v for k, v in resp.headers.items()}


def _push_blob(base: str, repo: str, data: bytes) -> dict[str, str | int]:
    """A monolithic upload (POST, then PUT ``?digest=``); the blob's descriptor."""
    location = _request(f"{base}/v2/{repo}/blobs/uploads/", "POST", b"", "application/octet-stream",
                        202)["location"]
    target = urljoin(base + "/", location)
    digest = _digest(data)
    target += ("&" if "?" in target else "?") + "digest=" + quote(digest, safe="")
    _request(target, "PUT", data, "application/octet-stream", 201)
    return {"digest": digest, "size": len(data)}


def push_image(registry: OciRegistry, repo: str, tag: str, files: dict[str, bytes]) -> str:
    """A plain OCI image (image config, one tar+gzip layer of ``files``), as a build tool pushes
    one; its manifest digest."""
    base = f"http://{registry.host}"
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    layer_desc = {"mediaType": LAYER_TYPE, **_push_blob(base, repo, layer(files))}
    config_desc = {"mediaType": CONFIG_TYPE, **_push_blob(base, repo, cfg)}
    body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                       "config": config_desc, "layers": [layer_desc]}).encode()
    got = _request(f"{base}/v2/{repo}/manifests/{tag}", "PUT", body, MANIFEST_TYPE, 201)
    digest = _digest(body)
    assert got.get("docker-content-digest", digest) == digest, (got, digest)
    return digest


@pytest.fixture
def allowed_registry(oci_registry: OciRegistry, monkeypatch: pytest.MonkeyPatch) -> OciRegistry:
    """The ``oci_registry`` fixture's registry, with the deployer's documented allowances for a
    loopback registry on plain HTTP set (``WB_OCI_PLAIN_HTTP``, ``WB_ALLOW_PRIVATE_HOSTS``)."""
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", oci_registry.host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    return oci_registry
