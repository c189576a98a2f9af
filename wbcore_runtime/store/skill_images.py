"""OCI skill images: read-only trees a posix toolkit's calls see at declared guest paths.

A posix toolkit declares them in its manifest (``docs/manifest.md``)::

    #+SKILL_IMAGES: oci://registry/skills/python@sha256:…=/skills/python oci://registry/skills/go:1=/skills/go

Each entry is ``REFERENCE=/guest/path``; entries are separated by spaces. At a call, the tier
(container, microvm) asks :func:`resolve` for each image's folder and mounts it read-only
at its path. An image is pulled **once**: through the runtime's OCI client
(``contract.distribution.Distribution.pull``, served by wbcore-oci: the core's one fetcher, its
SSRF guard — a loopback or private
registry needs the deployer's ``WB_ALLOW_PRIVATE_HOSTS``, plain http ``WB_OCI_PLAIN_HTTP``
— the manifest's bytes checked against a pinned digest and every blob against its
descriptor's digest and size), then its layers are unpacked in order by the one unpacker
(:mod:`wbcore_runtime.guard.unpack`: no path escapes, no devices or hard links, caps on files and
bytes) into ``$WB_HOME/oci/skills/<manifest digest>/`` — content-addressed, built in a
hidden folder and renamed into place, never written again. A tag reference is resolved
to its manifest digest at its first pull and remembered (``refs.json``); pin a digest
(``@sha256:…``) to choose the content yourself.

Accepted images: an OCI image manifest (``application/vnd.oci.image.manifest.v1+json``)
whose config is an OCI image config or a wbcore skill config, with tar (+gzip) layers.
Whiteout files (``.wh.*``, a layer deleting its parent's files) are refused: a skill image
is a tree, not a root file system built in steps.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.contract.distribution import Client, Reference
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard.unpack import Caps, UnsafeArchive, unpack_tar

KEYWORD = "SKILL_IMAGES"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
SKILL_CONFIG = "application/vnd.wbcore.skill.config.v1+json"
SKILL_TYPE = "application/vnd.wbcore.skill.v1"
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar",
               "application/vnd.docker.image.rootfs.diff.tar.gzip")
#: At most this many skill images per toolkit (each is a mount).
MAX_IMAGES = 4
#: Caps of one unpacked image.
MAX_FILES = 20000
MAX_BYTES = 512 << 20
_GUEST_RE = re.compile(r"^/[A-Za-z0-9._/-]{1,200}$")
#: Guest paths a skill image may not cover (the guest's own system and the call's scratch).
_RESERVED = ("/", "/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev", "/tmp",
             "/tmp/w", "/run", "/var", "/root", "/home", "/init")


@dataclass(frozen=True, slots=True)
class SkillImage:
    reference: str
    mount: str


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


def resolve(home: Path, image: SkillImage, env: Mapping[str, str] | None = None, *,
            client: Client) -> Path:
    """The unpacked, read-only tree of ``image``: from the cache, else pulled by ``client()`` (asked
    for only then: ``contract.distribution.service``), verified and unpacked once. Returns
    ``$WB_HOME/oci/skills/<digest>/tree``."""
    root = cache_root(home)
    root.mkdir(parents=True, exist_ok=True)
    ref = Reference.parse(image.reference)
    with open(root / ".lock", "a+") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one pull of an image at a time per home
        refs_path = root / "refs.json"
        try:
            refs = json.loads(refs_path.read_text())
        except (OSError, ValueError):
            refs = {}
        refs = refs if isinstance(refs, dict) else {}
        digest = ref.digest or refs.get(ref.text())
        if digest and (root / digest.replace(":", "-") / "tree").is_dir():
            return root / digest.replace(":", "-") / "tree"
        work = root / f".pull-{os.getpid()}-{time.monotonic_ns()}"
        try:
            pulled = client().pull(ref, work / "blobs", env=env,
                                   artifact_types=(IMAGE_CONFIG, SKILL_CONFIG, SKILL_TYPE))
            got = pulled.reference.digest
            assert got is not None
            final = root / got.replace(":", "-")
            if not (final / "tree").is_dir():
                tree = work / "tree"
                caps = Caps(max_files=MAX_FILES, max_bytes=MAX_BYTES)
                for desc, path in pulled.layers:
                    if desc.media_type not in LAYER_TYPES:
                        raise InvalidArgs(f"{ref.text()}: layer {desc.digest} is {desc.media_type!r}; "
                                          "a skill image's layers are tar archives "
                                          f"({', '.join(LAYER_TYPES)})")
                    unpack_tar(path, tree, caps)
                for dirpath, dirnames, filenames in os.walk(tree):
                    for n in filenames + dirnames:
                        if n.startswith(".wh."):
                            raise UnsafeArchive(f"{ref.text()}: whiteout {n!r} in "
                                                f"{dirpath[len(str(tree)):] or '/'}: "
                                                "a skill image is one tree; squash its layers")
                # Read-only for everyone but readable by all (the guest's uid and an
                # unprivileged QEMU read it; nobody writes it again).
                for dirpath, _dirnames, filenames in os.walk(tree):
                    for n in filenames:
                        p = os.path.join(dirpath, n)
                        if not os.path.islink(p):
                            os.chmod(p, 0o555 if os.stat(p).st_mode & 0o111 else 0o444)
                    os.chmod(dirpath, 0o555)
                (work / "meta.json").write_text(
                    json.dumps({"reference": pulled.reference.text(), "digest": got, "pulled": time.time()},
                               indent=1) + "\n")
                stage = work / "stage"
                stage.mkdir()
                os.rename(tree, stage / "tree")
                os.rename(work / "meta.json", stage / "meta.json")
                os.rename(stage, final)
            if not ref.digest:
                refs[ref.text()] = got
                tmp = root / f".refs.{os.getpid()}"
                tmp.write_text(json.dumps(refs, sort_keys=True, indent=1) + "\n")
                os.rename(tmp, refs_path)
            return final / "tree"
        finally:
            if work.exists():
                for dirpath, _dirs, _files in os.walk(work):
                    os.chmod(dirpath, 0o700)
                shutil.rmtree(work, ignore_errors=True)
