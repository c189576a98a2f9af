"""The content-addressed artifact store under ``$WB_HOME/artifacts``.

An artifact is a ``.wasm`` file named by the sha256 of its bytes::

    artifacts/ab/abcdef....wasm                      the module, exactly as built
    artifacts/ab/abcdef....<key>.cwasm               its compiled form for one engine
    artifacts/ab/abcdef....<key>.cwasm.sha256        digest of that compiled form

``<key>`` fingerprints whoever compiled it (engine name and version, engine config,
CPU architecture), so a cache built by another wasmtime version, config or machine
is never even opened by this one; a compiled file that fails its digest, or that the
engine refuses to load, is rebuilt rather than trusted. Every write is a temp file in
the same folder followed by ``os.replace``: concurrent writers of one artifact each
produce a whole file and the last rename wins, never a torn one.

The store knows nothing about wasmtime: the engine hands ``compiled()`` its own
``compile`` and ``load`` callbacks.

Beside it, ``$WB_HOME/store/trees/<digest>/`` holds read-only folders named by their
content digest (``#+PREOPEN`` data a call maps), written by
:func:`wbcore_runtime.build.snapshot.store_tree` and found by :func:`tree_path`.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from wbcore_runtime.guard import paths
from wbcore_runtime.store import faults, leftovers
from wbcore_runtime.store.digest import sha256
from wbcore_runtime.contract.errors import Internal, InvalidArgs, NotFound
from wbcore_runtime.contract.frozen import Frozen, set_fields

T = TypeVar("T")

SHA_RE = re.compile(r"^[0-9a-f]{64}$")
KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,120}$")
#: The largest module the store accepts (a 1.5 MB module compiles in ~1.5 s; 256 MiB is generous).
MAX_ARTIFACT_BYTES = 256 << 20
#: Content-addressed folders under ``$WB_HOME`` (see the module docstring).
TREES = "store/trees"


class IntegrityError(Internal):
    """Stored bytes do not match their sha256: the artifact is unavailable, never run."""


class Artifact(Frozen):
    __slots__ = __match_args__ = ("sha256", "path", "size")
    sha256: str
    path: Path
    size: int

    def __init__(self, sha256: str, path: Path, size: int) -> None:
        set_fields(self, sha256=sha256, path=path, size=size)


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        h = sha256(size=os.fstat(fh.fileno()).st_size)  # a big file: OpenSSL's, faster
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- atomic files: THE home of temp file + fsync + rename and of the folder's fsync ----------


def write_temp(path: Path, data: bytes | bytearray | memoryview, *, mode: int = 0o644,
               tmp_dir: Path | None = None) -> Path:
    """Write ``data`` to a new temp file for ``path``, fsync'd, and return it: the caller
    renames it into place (:func:`atomic_write`, or later, at a commit point of its own).

    The temp file is named after its owner (``wbcore_runtime.store.leftovers``), so one a kill leaves
    behind is swept by the next command, and never while its writer lives. ``tmp_dir``
    (same filesystem) keeps temp files in one folder the sweep reads, instead of beside
    ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.parent
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        base = tmp_dir
    tmp = base / leftovers.unique(f".{path.name}{leftovers.TMP_MARK}", ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        _drop(tmp)
        raise
    return tmp


def _drop(tmp: Path) -> None:
    """Remove a temp file that will not be renamed into place (already gone is fine)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def atomic_write(path: Path, data: bytes | bytearray | memoryview, *, mode: int | None = 0o644,
                 tmp_dir: Path | None = None, sync_dir: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file + fsync + ``os.replace``: a reader
    sees the old file or the new one, never a part. ``mode`` ``None`` keeps the mode of the
    file it replaces (0o644 for a new one); ``sync_dir`` also fsyncs the folder, so the
    rename itself survives a crash (a journal, a synced page). See :func:`write_temp`."""
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = 0o644
    tmp = write_temp(path, data, mode=mode, tmp_dir=tmp_dir)
    try:
        faults.point(f"write:{path.suffix}:tmp")
        os.replace(tmp, path)
        faults.point(f"write:{path.suffix}:done")
    except BaseException:
        _drop(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """fsync a folder: the renames and unlinks in it are on disk once this returns."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the compiled-module cache: THE home of "compile once, keep the engine's serialized form" --


def compiled_file(cpath: Path, wasm: Callable[[], bytes], *, compile: Callable[[bytes], bytes],
                  load: Callable[[Path], T], loads: Callable[[bytes], T] | None = None,
                  tmp_dir: Path | None = None) -> tuple[T, bool]:
    """The module kept compiled at ``cpath`` (its digest beside it, ``<cpath>.sha256``), or
    compiled now from ``wasm()`` and kept: ``(module, built)``. Every compiled-module cache
    calls this (the artifact store's, a lane's interpreter or compiler): the engine hands in
    ``compile(wasm) -> serialized``, ``load(path)`` and ``loads(serialized)``; ``cpath``'s
    name carries what makes a compiled form valid (the source digest, the engine's key).

    A kept form is loaded only when its bytes match the digest written beside it; one that
    does not (corrupt, torn, another engine's) is compiled again. The digest is written
    first, then the module: a reader that sees a new module with an old digest (a
    concurrent writer) just recompiles; it never loads a mismatch. A disk that refuses the
    write (full, read-only) costs a compile, never the run, when ``loads`` is given.
    """
    dpath = cpath.with_name(cpath.name + ".sha256")
    if cpath.is_file() and dpath.is_file():
        try:
            want = dpath.read_text().strip()
            if want == sha256_file(cpath):
                return load(cpath), False
        except Exception:  # noqa: BLE001, S110 - a refused cache (other engine, corrupt) is rebuilt below
            pass
    serialized = bytes(compile(wasm()))
    digest = sha256_bytes(serialized)
    try:
        atomic_write(dpath, (digest + "\n").encode(), tmp_dir=tmp_dir)
        atomic_write(cpath, serialized, tmp_dir=tmp_dir)
    except OSError:
        if loads is not None:
            return loads(serialized), True
        raise
    if loads is not None:
        return loads(serialized), True
    return load(cpath), True


def check_sha(sha: str) -> str:
    if not SHA_RE.match(sha):
        raise InvalidArgs(f"artifact digest {sha!r} is not a lowercase sha256 hex digest")
    return sha


def tree_path(home: Path, digest: str) -> Path:
    """The stored tree ``digest`` under ``home`` (``NotFound`` when it is not there as a folder)."""
    check_sha(digest)
    p = Path(home) / TREES / digest
    if not p.is_dir() or p.is_symlink():
        raise NotFound(f"stored tree {digest[:12]}… is missing from {home}")
    return p


class ArtifactStore:
    """Content-addressed ``.wasm`` files plus per-engine compiled caches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Temp files of writes in flight (swept if their writer died).
        self.tmp_dir = root / leftovers.ARTIFACT_TMP
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._paths: dict[str, str] = {}
        self._path_cache: dict[str, Path] = {}
        self._lock = threading.Lock()

    # --- the modules themselves -------------------------------------------------

    def path(self, sha: str) -> Path:
        p = self._path_cache.get(sha)
        if p is None:
            check_sha(sha)
            p = self.root / sha[:2] / f"{sha}.wasm"
            if len(self._path_cache) < 4096:
                self._path_cache[sha] = p
        return p

    def has(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def put_bytes(self, data: bytes | bytearray | memoryview) -> Artifact:
        if len(data) > MAX_ARTIFACT_BYTES:
            raise InvalidArgs(f"artifact of {len(data)} bytes is over the {MAX_ARTIFACT_BYTES}-byte cap")
        sha = sha256_bytes(data)
        path = self.path(sha)
        # Content addressing makes an existing, intact file the same bytes: keep it.
        if not (path.is_file() and self._intact(sha, path)):
            atomic_write(path, data, tmp_dir=self.tmp_dir)
        return Artifact(sha, path, len(data))

    def put_file(self, src: Path) -> Artifact:
        """``src`` stored: read once by ``guard.paths`` (a link out of its folder, a FIFO or a device
        refused, never followed; capped while read); the bytes read are the bytes hashed and kept."""
        try:
            data = paths.read_file(src.parent, src.name, MAX_ARTIFACT_BYTES, label="its folder")
        except paths.Refused as exc:
            raise InvalidArgs(f"cannot store {exc.message}: an artifact is a regular file of at most "
                              f"{MAX_ARTIFACT_BYTES} bytes; check what wrote it and build again") from None
        return self.put_bytes(data)

    @staticmethod
    def _stamp(path: Path | str) -> tuple[int, int, int]:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _intact(self, sha: str, path: Path) -> bool:
        try:
            stamp = self._stamp(path)
        except OSError:
            return False
        with self._lock:
            if self._verified.get(sha) == stamp:
                return True
        if sha256_file(path) != sha:
            return False
        with self._lock:
            self._verified[sha] = stamp
            self._paths[sha] = str(path)
        return True

    def verify(self, sha: str) -> Path:
        """The artifact's path once its bytes hash to ``sha``; else ``IntegrityError``.

        A full hash is paid once per process per file version; later calls compare the
        file's (inode, size, mtime) stamp, so a file replaced or rewritten after the first
        check is hashed again before it can run.
        """
        known = self._paths.get(sha)
        if known is not None:
            try:
                if self._verified.get(sha) == self._stamp(known):
                    return self.path(sha)
            except OSError:
                pass
        path = self.path(sha)
        if not path.is_file():
            raise NotFound(f"artifact {sha[:12]}… is not in the store ({path})")
        if not self._intact(sha, path):
            raise IntegrityError(
                f"artifact {sha[:12]}… at {path} does not match its sha256 (tampered or corrupt); "
                "it will not run — rebuild the toolkit"
            )
        return path

    def read_verified(self, sha: str) -> bytes:
        """The artifact's bytes, hashed as read (no window between check and use)."""
        path = self.path(sha)
        if not path.is_file():
            raise NotFound(f"artifact {sha[:12]}… is not in the store ({path})")
        data = path.read_bytes()
        if sha256_bytes(data) != sha:
            raise IntegrityError(
                f"artifact {sha[:12]}… at {path} does not match its sha256 (tampered or corrupt); "
                "it will not run — rebuild the toolkit"
            )
        with self._lock:
            try:
                self._verified[sha] = self._stamp(path)
                self._paths[sha] = str(path)
            except OSError:
                pass
        return data

    # --- compiled forms -----------------------------------------------------------

    def compiled_path(self, sha: str, key: str) -> Path:
        if not KEY_RE.match(key):
            raise InvalidArgs(f"compiled-cache key {key!r} must match {KEY_RE.pattern}")
        return self.root / sha[:2] / f"{sha}.{key}.cwasm"

    def compiled(
        self,
        sha: str,
        key: str,
        *,
        compile: Callable[[bytes], bytes],
        load: Callable[[Path], T],
        loads: Callable[[bytes], T] | None = None,
    ) -> tuple[T, bool]:
        """Load the compiled form of ``sha`` for engine ``key``, building it if needed.

        ``compile(wasm) -> serialized`` and ``load(path) -> module`` come from the engine.
        Returns ``(module, built)``; ``built`` is False when the cache was used. The source
        ``.wasm`` is hash-checked first in every case: a tampered module never compiles.
        """
        self.verify(sha)
        return compiled_file(self.compiled_path(sha, key), lambda: self.read_verified(sha), compile=compile,
                             load=load, loads=loads, tmp_dir=self.tmp_dir)

    def remove_compiled(self, sha: str) -> int:
        """Drop every compiled form of ``sha`` (all engines). Returns how many files went."""
        n = 0
        folder = self.root / sha[:2]
        if folder.is_dir():
            for p in folder.glob(f"{sha}.*.cwasm*"):
                try:
                    p.unlink()
                    n += 1
                except OSError:
                    pass
        return n
