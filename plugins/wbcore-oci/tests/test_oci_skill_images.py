"""OCI skill images pulled once into the home's cache (``Distribution.skill_image``): an image
served by a real local registry (Debian's docker-registry on loopback, the ``oci_registry``
fixture) is pulled through the client, verified by digest and unpacked content-addressed under
the home, read-only; a tampered layer leaves nothing behind."""

from __future__ import annotations

import os
import shutil

import pytest

from wbcore_oci import client as oci
from wbcore_runtime.guard.netguard import EgressDenied
from wbcore_runtime.store import skill_images
from wbcore_testing.oci_images import layer, push_image

CLIENT = oci.OciDistribution()
FILES = {"README.md": b"# python skill\n", "bin/hello.sh": b"#!/bin/sh\necho hello from the skill image\n"}


def test_pulled_once_verified_and_content_addressed(allowed_registry, tmp_path, monkeypatch) -> None:
    digest = push_image(allowed_registry, "skills/python", "1", FILES)
    im = skill_images.SkillImage(f"oci://{allowed_registry.host}/skills/python:1", "/skills/python")
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
    shutil.rmtree(allowed_registry.storage / "docker" / "registry" / "v2" / "blobs")
    assert CLIENT.skill_image(home, im) == tree
    pinned = skill_images.SkillImage(f"oci://{allowed_registry.host}/skills/python@{digest}",
                                     "/skills/python")
    assert CLIENT.skill_image(home, pinned) == tree  # by digest: no request at all
    # a cached image asks for no client: it runs with no OCI plugin installed
    assert skill_images.cached(home, im) == tree and skill_images.cached(home, pinned) == tree


def test_a_tampered_layer_is_refused(allowed_registry, tmp_path) -> None:
    push_image(allowed_registry, "skills/bad", "1", FILES)
    pushed = layer(FILES)
    blob = allowed_registry.blob_path(oci.Descriptor.of(pushed, "x").digest)
    blob.write_bytes(pushed[:-1] + bytes([pushed[-1] ^ 1]))
    im = skill_images.SkillImage(f"oci://{allowed_registry.host}/skills/bad:1", "/skills/bad")
    with pytest.raises(oci.OciError, match="tampered or corrupt, refused"):
        CLIENT.skill_image(tmp_path / "home", im)
    assert not [p for p in (tmp_path / "home" / "oci" / "skills").iterdir() if not p.name.startswith(".lock")]
