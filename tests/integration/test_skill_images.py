"""OCI skill images (``#+SKILL_IMAGES``): an image served by a real local registry (Debian's
docker-registry on loopback, the ``oci_registry`` fixture) is pulled once through the core's
OCI client, verified by digest, unpacked content-addressed under the home, and mounted
read-only at its declared path in the container tier and (slow suite) the microvm tier."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from wbcore_runtime.build import builder
from wbcore_oci import client as oci
from wbcore_runtime.store import skill_images
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard.netguard import EgressDenied
from wbcore_testing.fixtures import manifest_text, write_toolkit


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
    cd = oci.Descriptor.of(cfg, skill_images.IMAGE_CONFIG)
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


def skill_toolkit(root: Path, ident: str, cli: str, images: str) -> Path:
    return write_toolkit(root, ident,
                         manifest_text(ident, exec="posix", extra={"CLI_BIN": cli, "SKILL_IMAGES": images}))


def test_entries_are_checked() -> None:
    ok = skill_images.parse("oci://127.0.0.1:5000/skills/py:1=/skills/python "
                            "oci://h/x@sha256:" + "a" * 64 + "=/skills/x")
    assert [s.mount for s in ok] == ["/skills/python", "/skills/x"]
    for bad, why in [("oci://h/x:1", "write each entry"), ("oci://h/x:1=skills", "absolute guest path"),
                     ("oci://h/x:1=/skills/../etc", "absolute guest path"),
                     ("oci://h/x:1=/etc", "the guest's own"),
                     ("oci://h/x:1=/tmp/w/a", "the guest's own"), ("oci://h/X:1=/s", "repository name"),
                     ("oci://h/x:1=/s oci://h/y:1=/s", "two images")]:
        with pytest.raises(InvalidArgs, match=why):
            skill_images.parse(bad)


def test_pulled_once_verified_and_content_addressed(registry, tmp_path, monkeypatch) -> None:
    digest = push_image(registry, "skills/python", "1", FILES)
    im = skill_images.SkillImage(f"oci://{registry.host}/skills/python:1", "/skills/python")
    home = tmp_path / "home"
    monkeypatch.delenv("WB_ALLOW_PRIVATE_HOSTS")
    with pytest.raises(EgressDenied, match="SSRF guard"):  # loopback needs the deployer's allowance
        skill_images.resolve(home, im, client=lambda: CLIENT)
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    tree = skill_images.resolve(home, im, client=lambda: CLIENT)
    assert tree == home / "oci" / "skills" / digest.replace(":", "-") / "tree"
    assert (tree / "bin" / "hello.sh").read_bytes() == FILES["bin/hello.sh"]
    assert not os.access(tree / "README.md", os.W_OK) or os.geteuid() == 0
    assert (tree / "README.md").stat().st_mode & 0o222 == 0
    # pulled once: with the registry's blobs gone the cache still serves the tag
    shutil.rmtree(registry.storage / "docker" / "registry" / "v2" / "blobs")
    assert skill_images.resolve(home, im, client=lambda: CLIENT) == tree
    pinned = skill_images.SkillImage(f"oci://{registry.host}/skills/python@{digest}", "/skills/python")
    assert skill_images.resolve(home, pinned, client=lambda: CLIENT) == tree  # by digest: no request at all
    # a cached image asks for no client: it runs with no OCI plugin installed
    assert skill_images.resolve(home, im,
                                client=lambda: pytest.fail("a cached image asked for a client")) == tree


def test_a_tampered_layer_is_refused(registry, tmp_path) -> None:
    push_image(registry, "skills/bad", "1", FILES)
    layer = _layer(FILES)
    blob = registry.blob_path(oci.Descriptor.of(layer, "x").digest)
    blob.write_bytes(layer[:-1] + bytes([layer[-1] ^ 1]))
    im = skill_images.SkillImage(f"oci://{registry.host}/skills/bad:1", "/skills/bad")
    with pytest.raises(oci.OciError, match="tampered or corrupt, refused"):
        skill_images.resolve(tmp_path / "home", im, client=lambda: CLIENT)
    assert not [p for p in (tmp_path / "home" / "oci" / "skills").iterdir() if not p.name.startswith(".lock")]


def reachable_home(request) -> Path:
    """pytest's tmp_path is private to this user; the container (and an unprivileged QEMU)
    runs as another host uid that must reach the skill cache: a home in the world-searchable temp dir."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="wb-skill-home-"))
    os.chmod(home, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    return home


def test_container_tier_mounts_it_read_only(registry, make_runtime, toolkit_root, wbx, request) -> None:
    from wbcore_container import bwrap

    if not bwrap.probe()[0]:
        pytest.skip(f"bubblewrap unavailable here: {bwrap.probe()[1]}")
    push_image(registry, "skills/python", "1", FILES)
    rt = make_runtime(home=reachable_home(request))
    skill_toolkit(toolkit_root, "skilled", "sh", f"oci://{registry.host}/skills/python:1=/skills/python")
    rt.discover(refresh=True)
    name = builder.build(rt, "skilled").name
    r = wbx("run", name, "-c", "cat /skills/python/README.md; /skills/python/bin/hello.sh; "
            "touch /skills/python/x 2>/dev/null && echo WROTE || echo read-only", runtime=rt, input=b"")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "# python skill\nhello from the skill image\nread-only\n"


@pytest.mark.slow
def test_microvm_tier_mounts_it_read_only(registry, make_runtime, toolkit_root, monkeypatch, request) -> None:
    from wbcore_microvm import tiers

    if not tiers._probe_tools()[0]:
        pytest.skip(f"microvm unavailable: {tiers._probe_tools()[1]}")
    monkeypatch.setenv("WB_MICROVM_CACHE", os.environ.get("WB_MICROVM_CACHE")
                       or str(Path.home() / ".cache" / "wbcore" / "microvm"))
    monkeypatch.setenv("WB_MICROVM_POOL", "0")
    push_image(registry, "skills/python", "1", FILES)
    rt = make_runtime(home=reachable_home(request))
    skill_toolkit(toolkit_root, "skilledvm", "sh", f"oci://{registry.host}/skills/python:1=/skills/python")
    rt.discover(refresh=True)
    name = builder.build(rt, "skilledvm").name
    res = rt.call(name, ["-c", "cat /skills/python/README.md; sh /skills/python/bin/hello.sh; "
                         "touch /skills/python/x 2>/dev/null && echo WROTE || echo read-only"], b"",
                  tier="microvm")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == b"# python skill\nhello from the skill image\nread-only\n"
