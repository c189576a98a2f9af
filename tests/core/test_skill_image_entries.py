"""OCI skill images in the core (``store.skill_images``): the ``#+SKILL_IMAGES`` entries the
builder checks, and the cache a tier reads before it asks for any OCI client (the pull itself is
wbcore-oci's: plugins/wbcore-oci/tests/test_oci_skill_images.py)."""

from __future__ import annotations

import json

import pytest

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.store import skill_images


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


def test_a_cached_image_needs_no_client(tmp_path) -> None:
    digest = "sha256:" + "b" * 64
    tag = skill_images.SkillImage("oci://h/skills/py:1", "/skills/python")
    pinned = skill_images.SkillImage(f"oci://h/skills/py@{digest}", "/skills/python")
    home = tmp_path / "home"
    assert skill_images.cached(home, tag) is None and skill_images.cached(home, pinned) is None
    root = skill_images.cache_root(home)
    tree = root / digest.replace(":", "-") / "tree"
    tree.mkdir(parents=True)
    assert skill_images.cached(home, pinned) == tree  # a pinned digest: its folder
    assert skill_images.cached(home, tag) is None  # a tag: only once resolved by a pull
    (root / "refs.json").write_text("not json")
    assert skill_images.cached(home, tag) is None
    (root / "refs.json").write_text(json.dumps({"oci://h/skills/py:1": digest}))
    assert skill_images.cached(home, tag) == tree
