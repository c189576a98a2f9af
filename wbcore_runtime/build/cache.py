"""The build cache: the ONE key function, the source digest it covers, and the record store.

A cache hit hands one toolkit's build product to another, so the key must cover every
input that can change the output — otherwise a toolkit can build bytes that are then
served as a hit for another toolkit's sources (cache poisoning). :func:`key` covers:

- the **source tree exactly as the lane sees it**: the digest of the private, read-only
  snapshot the lane compiles (:func:`wbcore_runtime.build.snapshot.take`, in
  :func:`tree_digest`'s form): every file and symlink under the bound folder, *including*
  ``.git`` and ``__pycache__`` — the sandbox mounts the whole snapshot, never the live
  folder, so the key names the very bytes compiled;
- the **toolkit** it is built for: its ``ID`` (below) and its **signer** (the signing DID);
- the **entry** inside that tree the lane builds;
- the **lane's name and its driver's version**, which names the toolchain's identity
  (``zig 0.x; recipe``, ``go1.x``, ``rustc 1.x``, ``componentize-py x on CPython y``);
- the **flags** (``#+BUILD_FLAGS`` or the caller's);
- the **manifest fields the lane declares output-relevant** (``BuildLane.output_fields``,
  e.g. python: ``PY_MODULE``, ``WIT_WORLD``, ``WASI``), the artifact's name (``CLI_BIN``
  and the id), ``EXEC`` and the kernel ABI fields (:data:`ALWAYS_FIELDS`).

No other module computes a cache key (``tests/core/test_build_cache.py`` walks the tree).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.toolkit.manifest import Manifest

#: Bumped when what the key covers changes: every older entry becomes a miss.
KEY_FORMAT = 3
#: Manifest fields every lane's key covers: the artifact is named after ``CLI_BIN``/``ID``
#: (and a build is never shared between toolkits); ``EXEC`` and the kernel ABI say what
#: the module is built to be, for lanes that shape their output by them.
ALWAYS_FIELDS = ("CLI_BIN", "ID", "EXEC", "KERNEL_ENTRY", "KERNEL_IN_OFF", "KERNEL_OUT_OFF")


def tree_digest(root: Path, *, max_files: int = 20000, max_bytes: int = 512 << 20) -> str:
    """sha256 over (relative path, mode bit x, content) of every regular file, sorted,
    at every depth — ``.git`` and ``__pycache__`` included, as the sandbox shows them.

    Symlinks are recorded by target text, never followed, so a link cannot pull
    outside content into a digest. Empty folders are recorded too (a lane may test for one).
    """
    h = hashlib.sha256()
    files = 0
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        if here != root and not dirnames and not filenames:
            h.update(b"D" + here.relative_to(root).as_posix().encode() + b"\0")
        # os.walk lists symlinks to folders among dirnames: record them as links, not walk them.
        for name in [d for d in dirnames if (here / d).is_symlink()]:
            dirnames.remove(name)
            filenames.append(name)
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            files += 1
            if files > max_files:
                raise ValueError(f"{root}: more than {max_files} files")
            if path.is_symlink():
                h.update(b"L" + rel.encode() + b"\0" + os.readlink(path).encode() + b"\0")
                continue
            # Through containment: a FIFO, a device or a hard link is refused, never read.
            with paths.open_file(root, rel, label="the source folder") as fh:
                st = os.fstat(fh.fileno())
                h.update(b"F" + rel.encode() + b"\0" + (b"x" if st.st_mode & 0o111 else b"-"))
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    total += len(chunk)  # counted as read: a file growing under us is still capped
                    if total > max_bytes:
                        raise ValueError(f"{root}: more than {max_bytes} bytes")
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def manifest_fields(manifest: Manifest, names: Iterable[str]) -> dict[str, str | None]:
    """The values of ``names`` in ``manifest``: a ``#+KEYWORD`` outside the core list
    (``PY_MODULE``), else the core field of that name (``CLI_BIN`` → ``cli_bin``)."""
    out: dict[str, str | None] = {}
    for name in names:
        value = manifest.extra(name)
        if value is None:
            attr = getattr(manifest, name.lower(), None)
            value = attr if isinstance(attr, str) or attr is None else json.dumps(attr, default=str)
        out[name] = value
    return out


def key(*, lane: str, version: str, source_digest: str, flags: Iterable[str] = (), entry: str | None = None,
        fields: Mapping[str, str | None] | None = None, signer: str | None = None) -> str:
    """THE build-cache key: sha256 over every input that changes a lane's output (see the
    module docstring). ``version`` is the lane driver's, which includes its toolchain;
    ``source_digest`` is the digest of the snapshot the lane compiles; ``signer`` the
    toolkit's signing identity (a build is never shared between signers)."""
    blob = canonical_json({
        "format": KEY_FORMAT, "lane": lane, "version": version, "source": source_digest,
        "flags": list(flags), "entry": entry, "fields": dict(sorted((fields or {}).items())),
        "signer": signer,
    })
    return hashlib.sha256(blob).hexdigest()


def lookup(cache_dir: Path, cache_key: str, artifacts: Any) -> str | None:
    """The artifact sha256 recorded under ``cache_key``, if it is still in the store intact."""
    record = cache_dir / f"{cache_key}.json"
    if not record.is_file():
        return None
    try:
        sha = json.loads(record.read_text())["sha256"]
        artifacts.verify(sha)
    except (WbError, ValueError, KeyError, OSError, TypeError):
        return None
    return str(sha)


def remember(cache_dir: Path, cache_key: str, sha256: str, **about: Any) -> None:
    """Record that ``cache_key`` built ``sha256`` (atomically: a killed build leaves no half record)."""
    atomic_write(cache_dir / f"{cache_key}.json", json.dumps({"sha256": sha256, **about}).encode())
