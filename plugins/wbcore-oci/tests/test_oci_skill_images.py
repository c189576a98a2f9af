"""OCI skill images pulled once into the home's cache (``Distribution.skill_image``): an image
served by a real local registry (Debian's docker-registry on loopback, the ``oci_registry``
fixture) is pulled through the client, verified by digest and unpacked content-addressed under
the home, read-only; a tampered layer leaves nothing behind."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile

import pytest

from wbcore_oci import client as oci
from wbcore_oci.skill_images import IMAGE_CONFIG
from wbcore_runtime.guard.netguard import EgressDenied
from wbcore_runtime.store import skill_images


def _layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755 if name.endswith(".sh") else 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def push_image(reg, repo: str, tag: str, files: dict[str, bytes]) -> str:
    """A plain OCI image (image config, one tar+gzip layer), as a build tool pushes one; its manifest
    digest."""
    r = oci.OciClient(reg.host)
    layer = _layer(files)
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    ld = oci.Descriptor.of(layer, "application/vnd.oci.image.layer.v1.tar+gzip")
    cd = oci.Descriptor.of(cfg, IMAGE_CONFIG)
    r.push_blob(repo, layer, ld)
    r.push_blob(repo, cfg, cd)
    body = json.dumps({"schemaVersion": 2, "mediaType": oci.MANIFEST_TYPE,
                       "config": {"mediaType": cd.media_type, "digest": cd.digest, "size": cd.size},
                       "layers": [{"mediaType": ld.media_type, "digest": ld.digest,
                                   "size": ld.size}]}).encode()
    return r.push_manifest(repo, tag, body)


CLIENT = oci.OciDistribution()
FILES = {"README.md": b"# python skill\n", "bin/hello.sh": b"#!/bin/sh\necho hello from the skill image\n"}


@pytest.fixture
def registry(oci_registry, monkeypatch):
    # the deployer's documented allowances for a loopback registry on plain http
    monkeypatch.setenv("WB_OCI_PLAIN_HTTP", oci_registry.host)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    return oci_registry


def test_pulled_once_verified_and_content_addressed(registry, tmp_path, monkeypatch) -> None:
    digest = push_image(registry, "skills/python", "1", FILES)
    im = skill_images.SkillImage(f"oci://{registry.host}/skills/python:1", "/skills/python")
    home = tmp_path / "home"
    monkeypatch.delenv("WB_ALLOW_PRIVATE_HOSTS")
    with pytest.raises(EgressDenied, match="SSRF guard"):  # loopback needs the deployer's allowance
        CLIENT.skill_image(home, im)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    tree = CLIENT.skill_image(home, im)
    assert tree == home / "oci" / "skills" / digest.replace(":", "-") / "tree"
    assert (tree / "bin" / "hello.sh").read_bytes() == FILES["bin/hello.sh"]
    assert not os.access(tree / "README.md", os.W_OK) or os.geteuid() == 0
    assert (tree / "README.md").stat().st_mode & 0o222 == 0
    # pulled once: with the registry's blobs gone the cache still serves the tag
    shutil.rmtree(registry.storage / "docker" / "registry" / "v2" / "blobs")
    assert CLIENT.skill_image(home, im) == tree
    pinned = skill_images.SkillImage(f"oci://{registry.host}/skills/python@{digest}", "/skills/python")
    assert CLIENT.skill_image(home, pinned) == tree  # by digest: no request at all
    # a cached image asks for no client: it runs with no OCI plugin installed
    assert skill_images.cached(home, im) == tree and skill_images.cached(home, pinned) == tree


def test_a_tampered_layer_is_refused(registry, tmp_path) -> None:
    push_image(registry, "skills/bad", "1", FILES)
    layer = _layer(FILES)
    blob = registry.blob_path(oci.Descriptor.of(layer, "x").digest)
    blob.write_bytes(layer[:-1] + bytes([layer[-1] ^ 1]))
    im = skill_images.SkillImage(f"oci://{registry.host}/skills/bad:1", "/skills/bad")
    with pytest.raises(oci.OciError, match="tampered or corrupt, refused"):
        CLIENT.skill_image(tmp_path / "home", im)
    assert not [p for p in (tmp_path / "home" / "oci" / "skills").iterdir() if not p.name.startswith(".lock")]
