"""Build from a snapshot: the private, read-only copy of a lane's inputs that it compiles.

Check first, use later is a race: a folder hashed for the cache key and then compiled from
where it lies can change in between (a concurrent writer swaps a file while the compiler
runs and swaps it back before the post-build check; or swaps ``src/`` for a symlink to a
host folder the moment the sandbox binds it). So every build copies its inputs once,
hashing the bytes as it writes them, into a folder under the home's work area that nobody
else writes, and everything after that — the cache key, the lane, the sandbox's ``/src``
bind — uses the copy:

- :func:`take` walks the source with :func:`wbcore_runtime.guard.paths.walk` (``openat`` with
  ``O_NOFOLLOW`` from open folders: a folder swapped for a link mid-walk is refused, never
  followed), refusing what containment refuses (FIFOs, devices, sockets, hard links, and
  links whose text is absolute or leads outside the copy); the digest is
  :func:`wbcore_runtime.build.cache.tree_digest`'s, taken over the bytes written;
- :func:`store_tree` keeps a snapshot content-addressed in ``$WB_HOME/store/trees/<digest>``
  (``#+PREOPEN`` data is served from there at run time, never from the toolkit folder);
- :func:`discard` removes a snapshot (its folders are read-only);
- :func:`shown` names the source, not the copy, in an error found in the copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.store import leftovers
from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.store.artifacts import TREES

#: The same bounds as :func:`wbcore_runtime.build.cache.tree_digest`.
MAX_FILES = 20_000
MAX_BYTES = 512 << 20


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A read-only copy of a source folder and the digest of what was copied."""

    dir: Path
    digest: str
    files: int
    bytes: int


def take(source: Path, dest: Path, *, label: str = "the source folder",
         skip_dirs: frozenset[str] = frozenset(), max_files: int = MAX_FILES,
         max_bytes: int = MAX_BYTES, skip_hidden: bool = False) -> Snapshot:
    """Copy ``source`` into ``dest`` (which must not exist) and make the copy read-only.

    ``digest`` equals ``cache.tree_digest(dest)``: it is computed from the bytes as they
    were read and written, so it names the copy, whatever the source became since.
    ``skip_dirs`` and ``skip_hidden`` leave out what :func:`wbcore_runtime.guard.paths.walk` does."""
    h = hashlib.sha256()
    files = total = 0
    os.mkdir(dest, 0o700)
    try:
        for node in paths.walk(source, label=label, skip_dirs=skip_dirs, max_files=max_files,
                               skip_hidden=skip_hidden):
            try:
                rel = node.rel.encode()
            except UnicodeEncodeError:
                raise paths.Refused(Path(source) / node.rel, "a file name that is not UTF-8") from None
            target = dest / node.rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if node.kind == "empty":
                target.mkdir()
                h.update(b"D" + rel + b"\0")
                continue
            files += 1
            if node.kind == "link":
                if os.path.isabs(node.target):
                    raise paths.Refused(Path(source) / node.rel,
                                        f"a symlink to an absolute path ({node.target!r}), outside {label}; "
                                        f"a link in {label} must stay inside it, as relative text")
                os.symlink(node.target, target)
                h.update(b"L" + rel + b"\0" + node.target.encode() + b"\0")
                continue
            h.update(b"F" + rel + b"\0" + (b"x" if node.executable else b"-"))
            with open(target, "xb") as out:
                while chunk := os.read(node.fd, 1 << 20):
                    total += len(chunk)  # counted as read: a file growing under us is still capped
                    if total > max_bytes:
                        raise paths.Refused(Path(source), f"more than {max_bytes} bytes in {label}")
                    h.update(chunk)
                    out.write(chunk)
            os.chmod(target, 0o555 if node.executable else 0o444)
            h.update(b"\0")
        # Links are checked on the copy, which nobody else writes: every hop resolved by the
        # one containment rule, so a chain of links that each look local cannot lead out.
        root = paths.Root.at(dest, label)
        for dirpath, dirnames, filenames in os.walk(dest):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                rel_s = p.relative_to(dest).as_posix()
                if p.is_symlink() and not root.stays_inside(rel_s):
                    raise paths.Refused(Path(source) / rel_s, f"symlink to a path outside {label}")
        _seal(dest)
    except BaseException:
        discard(dest)
        raise
    return Snapshot(dir=dest, digest=h.hexdigest(), files=files, bytes=total)


def _seal(folder: Path) -> None:
    """Folders read-only, bottom up (files were made read-only as they were written)."""
    for dirpath, _dirnames, _filenames in os.walk(folder, topdown=False):
        os.chmod(dirpath, 0o555)


def discard(folder: Path) -> None:
    """Remove a snapshot (or a half-made one): its folders are made writable first."""
    if not os.path.lexists(folder):
        return
    for dirpath, dirnames, _filenames in os.walk(folder):
        os.chmod(dirpath, 0o700)
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(folder, ignore_errors=True)


def shown(exc: WbError, copy: Path, source: Path) -> WbError:
    """``exc`` with the copy's path in its message replaced by the source's: a person is told
    about the folder they named, not the private copy that was checked in its place."""
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (exc.args[0].replace(str(copy), str(source)), *exc.args[1:])
    return exc


def store_tree(home: Path, source: Path, *, label: str = "the folder") -> tuple[str, Path]:
    """Snapshot ``source`` into the home's content-addressed tree store: ``(digest, path)``.

    A tree already stored under that digest is kept (the home is trusted as the artifact
    store is); a new one lands by one rename, so a reader never sees half of it."""
    base = home / TREES
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / leftovers.unique(".tmp-")
    snap = take(source, tmp, label=label)
    final = base / snap.digest
    if final.is_dir():
        discard(tmp)
        return snap.digest, final
    try:
        os.rename(tmp, final)
    except OSError:  # another build stored the same tree first
        discard(tmp)
        if not final.is_dir():
            raise
    return snap.digest, final
