"""OCI skill images (``#+SKILL_IMAGES``): an image served by a real local registry (Debian's
docker-registry on loopback, the ``oci_registry`` fixture) is pulled once through the OCI
client (wbcore-oci) and mounted read-only at its declared path in the container tier and (slow
suite) the microvm tier. The entries' checks and the cache are the core's
(tests/core/test_skill_image_entries.py), the verified pull wbcore-oci's
(plugins/wbcore-oci/tests/test_oci_skill_images.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from wbcore_runtime.build import builder
from wbcore_testing.fixtures import manifest_text, write_toolkit
from wbcore_testing.oci_images import push_image

FILES = {"README.md": b"# python skill\n", "bin/hello.sh": b"#!/bin/sh\necho hello from the skill image\n"}


def skill_toolkit(root: Path, ident: str, cli: str, images: str) -> Path:
    return write_toolkit(root, ident,
                         manifest_text(ident, exec="posix", extra={"CLI_BIN": cli, "SKILL_IMAGES": images}))


def reachable_home(request) -> Path:
    """pytest's tmp_path is private to this user; the container (and an unprivileged QEMU)
    runs as another host uid that must reach the skill cache: a home in the world-searchable temp dir."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="wb-skill-home-"))
    os.chmod(home, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    return home


def test_container_tier_mounts_it_read_only(allowed_registry, make_runtime, toolkit_root, wbx,
                                            request) -> None:
    from wbcore_container import bwrap

    if not bwrap.probe()[0]:
        pytest.skip(f"bubblewrap unavailable here: {bwrap.probe()[1]}")
    push_image(allowed_registry, "skills/python", "1", FILES)
    rt = make_runtime(home=reachable_home(request))
    skill_toolkit(toolkit_root, "skilled", "sh",
                  f"oci://{allowed_registry.host}/skills/python:1=/skills/python")
    rt.discover(refresh=True)
    name = builder.build(rt, "skilled").name
    r = wbx("run", name, "-c", "cat /skills/python/README.md; /skills/python/bin/hello.sh; "
            "touch /skills/python/x 2>/dev/null && echo WROTE || echo read-only", runtime=rt, input=b"")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "# python skill\nhello from the skill image\nread-only\n"


@pytest.mark.slow
def test_microvm_tier_mounts_it_read_only(allowed_registry, make_runtime, toolkit_root, monkeypatch,
                                          request) -> None:
    from wbcore_microvm import tiers

    if not tiers._probe_tools()[0]:
        pytest.skip(f"microvm unavailable: {tiers._probe_tools()[1]}")
    monkeypatch.setenv("WB_MICROVM_CACHE", os.environ.get("WB_MICROVM_CACHE")
                       or str(Path.home() / ".cache" / "wbcore" / "microvm"))
    monkeypatch.setenv("WB_MICROVM_POOL", "0")
    push_image(allowed_registry, "skills/python", "1", FILES)
    rt = make_runtime(home=reachable_home(request))
    skill_toolkit(toolkit_root, "skilledvm", "sh",
                  f"oci://{allowed_registry.host}/skills/python:1=/skills/python")
    rt.discover(refresh=True)
    name = builder.build(rt, "skilledvm").name
    res = rt.call(name, ["-c", "cat /skills/python/README.md; sh /skills/python/bin/hello.sh; "
                         "touch /skills/python/x 2>/dev/null && echo WROTE || echo read-only"], b"",
                  tier="microvm")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == b"# python skill\nhello from the skill image\nread-only\n"
