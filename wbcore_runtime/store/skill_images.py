"""OCI skill images: read-only trees a posix toolkit's calls see at declared guest paths.

A posix toolkit declares them in its manifest (``docs/manifest.md``)::

    #+SKILL_IMAGES: oci://registry/skills/python@sha256:…=/skills/python oci://registry/skills/go:1=/skills/go

Each entry is ``REFERENCE=/guest/path``, separated by spaces; :func:`parse` checks them (at
build). At a call the tier (container, microvm) mounts each image's tree read-only at its path:
from the cache (:func:`cached`, asking for no client: a cached image runs with no OCI plugin),
else pulled once, verified by digest and unpacked by the OCI client
(``contract.distribution.Distribution.skill_image``, wbcore-oci) into
``$WB_HOME/oci/skills/<manifest digest>/tree``, content-addressed and never written again; a
tag is resolved to its digest at its first pull and remembered in ``refs.json``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from wbcore_runtime.contract.distribution import Reference, SkillImage
from wbcore_runtime.contract.errors import InvalidArgs

__all__ = ["SkillImage", "cache_root", "cached", "parse", "read_refs", "refs_path", "tree_of"]

KEYWORD = "SKILL_IMAGES"
#: At most this many skill images per toolkit (each is a mount).
MAX_IMAGES = 4
_GUEST_RE = re.compile(r"^/[A-Za-z0-9._/-]{1,200}$")
#: Guest paths a skill image may not cover (the guest's own system and the call's scratch).
_RESERVED = ("/", "/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev", "/tmp",
             "/tmp/w", "/run", "/var", "/root", "/home", "/init")


def parse(value: str | None, where: str = "#+SKILL_IMAGES") -> tuple[SkillImage, ...]:
    """The entries of a ``#+SKILL_IMAGES`` value (``REF=/guest/path`` …), checked."""
    if not value or not value.strip():
        return ()
    out: list[SkillImage] = []
    for item in value.split():
        ref, sep, mount = item.rpartition("=")
        if not sep or not ref:
            raise InvalidArgs(f"{where}: {item!r}: write each entry as oci://REGISTRY/REPO[:TAG|@sha256:…]=/guest/path")
        Reference.parse(ref)  # a clear error for a malformed reference
        norm = os.path.normpath(mount)
        if not _GUEST_RE.match(mount) or norm != mount.rstrip("/") or ".." in mount.split("/"):
            raise InvalidArgs(f"{where}: {item!r}: the mount must be an absolute guest path "
                              "such as /skills/python")
        if norm in _RESERVED or any(norm.startswith(r + "/") for r in ("/proc", "/sys", "/dev", "/tmp/w")):
            raise InvalidArgs(f"{where}: {item!r}: {norm} is the guest's own; "
                              "mount skills elsewhere (e.g. /skills/NAME)")
        if any(s.mount == norm for s in out):
            raise InvalidArgs(f"{where}: two images at {norm}")
        out.append(SkillImage(ref, norm))
    if len(out) > MAX_IMAGES:
        raise InvalidArgs(f"{where}: at most {MAX_IMAGES} skill images (got {len(out)})")
    return tuple(out)


def cache_root(home: Path) -> Path:
    return home / "oci" / "skills"


def tree_of(root: Path, digest: str) -> Path:
    """The unpacked tree of the image whose manifest digest is ``digest``, under ``root``."""
    return root / digest.replace(":", "-") / "tree"


def refs_path(root: Path) -> Path:
    """The tags resolved at their first pull: ``{reference text: manifest digest}``."""
    return root / "refs.json"


def read_refs(root: Path) -> dict[str, str]:
    try:
        refs = json.loads(refs_path(root).read_text())
    except (OSError, ValueError):
        refs = {}
    return refs if isinstance(refs, dict) else {}


def cached(home: Path, image: SkillImage) -> Path | None:
    """``image``'s tree if pulled before, else None; asks for no client and takes no lock (a tree
    and ``refs.json`` appear by rename, whole)."""
    root = cache_root(home)
    ref = Reference.parse(image.reference)
    digest = ref.digest or read_refs(root).get(ref.text())
    if digest and tree_of(root, digest).is_dir():
        return tree_of(root, digest)
    return None
