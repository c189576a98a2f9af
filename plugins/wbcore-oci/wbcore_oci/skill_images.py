"""OCI skill images (``#+SKILL_IMAGES``) pulled once into the home's cache: the engine behind
``Distribution.skill_image`` (the container and microvm tiers ask for it when
``wbcore_runtime.store.skill_images.cached`` has no tree yet).

The client pulls the image (the manifest checked against a pinned digest, every blob against
its descriptor's digest and size), then its layers are unpacked in order by the core's one
unpacker (:mod:`wbcore_runtime.guard.unpack`: no path escapes, no devices or hard links, caps on
files and bytes counted across all the layers) into ``$WB_HOME/oci/skills/<manifest digest>/tree`` (the core's
``store.skill_images`` names the layout): built in a hidden folder and renamed into place,
read-only, never written again; one pull at a time per home (a lock file). A tag is resolved to
its manifest digest at its first pull and remembered in ``refs.json``.

Accepted images: an OCI image manifest (``application/vnd.oci.image.manifest.v1+json``) whose
config is an OCI image config or a wbcore skill config, with tar (+gzip) layers. Whiteout files
(``.wh.*``, a layer deleting its parent's files) are refused: a skill image is a tree, not a root
file system built in steps.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from wbcore_runtime.contract.distribution import Distribution, Reference, SkillImage
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard.unpack import Caps, UnsafeArchive, unpack_layers
from wbcore_runtime.store import locks
from wbcore_runtime.store.skill_images import cache_root, read_refs, refs_path, tree_of

IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
SKILL_CONFIG = "application/vnd.wbcore.skill.config.v1+json"
SKILL_TYPE = "application/vnd.wbcore.skill.v1"
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar",
               "application/vnd.docker.image.rootfs.diff.tar.gzip")
#: Caps of one unpacked image (all its layers together).
MAX_FILES = 20000
MAX_BYTES = 512 << 20
#: How long a pull waits for another pulling into the same home (its requests are each capped).
PULL_WAIT_S = 600.0


def resolve(home: Path, image: SkillImage, env: Mapping[str, str] | None, *, client: Distribution) -> Path:
    """The unpacked, read-only tree of ``image``: from the cache, else pulled by ``client``,
    verified and unpacked once. Returns ``$WB_HOME/oci/skills/<digest>/tree``."""
    root = cache_root(home)
    root.mkdir(parents=True, exist_ok=True)
    ref = Reference.parse(image.reference)
    # one pull of an image at a time per home; a pull's requests are capped, a suspended one is not
    with locks.held(root / ".lock", what=f"pull {image.reference}", wait_s=PULL_WAIT_S):
        refs = read_refs(root)
        digest = ref.digest or refs.get(ref.text())
        if digest and tree_of(root, digest).is_dir():
            return tree_of(root, digest)
        work = root / f".pull-{os.getpid()}-{time.monotonic_ns()}"
        try:
            pulled = client.pull(ref, work / "blobs", env=env,
                                 artifact_types=(IMAGE_CONFIG, SKILL_CONFIG, SKILL_TYPE))
            got = pulled.reference.digest
            assert got is not None
            target = tree_of(root, got)  # the layout is the core's: <digest>/tree
            final = target.parent
            if not target.is_dir():
                tree = work / "tree"
                caps = Caps(max_files=MAX_FILES, max_bytes=MAX_BYTES)
                for desc, _path in pulled.layers:
                    if desc.media_type not in LAYER_TYPES:
                        raise InvalidArgs(f"{ref.text()}: layer {desc.digest} is {desc.media_type!r}; "
                                          "a skill image's layers are tar archives "
                                          f"({', '.join(LAYER_TYPES)})")
                # the caps are the image's: one budget across its layers
                unpack_layers([path for _desc, path in pulled.layers], tree, caps)
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
                os.rename(tree, stage / target.name)
                os.rename(work / "meta.json", stage / "meta.json")
                os.rename(stage, final)
            if not ref.digest:
                refs[ref.text()] = got
                tmp = root / f".refs.{os.getpid()}"
                tmp.write_text(json.dumps(refs, sort_keys=True, indent=1) + "\n")
                os.rename(tmp, refs_path(root))
            return target
        finally:
            if work.exists():
                for dirpath, _dirs, _files in os.walk(work):
                    os.chmod(dirpath, 0o700)
                shutil.rmtree(work, ignore_errors=True)
