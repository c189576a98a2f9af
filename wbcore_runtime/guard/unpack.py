"""Bring untrusted trees onto disk safely: archives (tar, zip) and folders, with hard caps.

Refused, each with a message naming the entry: absolute paths, ``..`` segments, links
that resolve outside the tree, hard links, devices and FIFOs, more than ``max_files``
entries or ``max_bytes`` of content (counted as written, so a lying header or a
decompression bomb stops at the cap). ``.git`` folders are never copied.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class Caps:
    max_files: int = 5000
    max_bytes: int = 256 * MiB


class UnsafeArchive(InvalidArgs):
    """An archive or tree that would write outside its folder, or is over a cap."""


class _Budget:
    def __init__(self, caps: Caps, what: str) -> None:
        self.caps = caps
        self.what = what
        self.files = 0
        self.bytes = 0

    def entry(self, name: str) -> None:
        self.files += 1
        if self.files > self.caps.max_files:
            raise UnsafeArchive(f"{self.what}: more than {self.caps.max_files} entries (at {name!r})")

    def add(self, n: int, name: str) -> None:
        self.bytes += n
        if self.bytes > self.caps.max_bytes:
            raise UnsafeArchive(f"{self.what}: more than {self.caps.max_bytes} bytes unpacked (at {name!r})")


def safe_name(name: str, what: str) -> str:
    """A relative POSIX path with no ``..``; ``./`` prefixes and trailing slashes removed."""
    raw = name.replace("\\", "/") if "\\" in name else name
    if "\x00" in raw:
        raise UnsafeArchive(f"{what}: entry {name!r} contains a NUL byte")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise UnsafeArchive(f"{what}: entry {name!r} is an absolute path")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{what}: entry {name!r} climbs out with '..'")
    return "/".join(parts)


def _check_link(rel: str, target: str, what: str) -> None:
    if target.startswith("/"):
        raise UnsafeArchive(f"{what}: link {rel!r} → {target!r} points to an absolute path, outside the tree")
    if not target or "\x00" in target:
        raise UnsafeArchive(f"{what}: link {rel!r} → {target!r} points outside the tree")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        raise UnsafeArchive(f"{what}: link {rel!r} → {target!r} escapes the tree")


def _inside(root: Path, path: Path) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def _mkdir(root: Path, rel: str, what: str) -> None:
    # Checked before it is made: links inside the tree may chain out of it (``a -> .``,
    # ``a/b -> ..``, ``c -> b/..``), and a folder made through them would stay outside.
    if not _inside(root, root / rel):
        raise UnsafeArchive(f"{what}: folder {rel!r} resolves outside the tree")
    _folder(root / rel, rel, what)


def _folder(path: Path, rel: str, what: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # never an OSError naming the staging path
        if exc.errno not in (errno.EEXIST, errno.ENOTDIR, errno.ELOOP):
            raise
        loop = " (a loop of links)" if exc.errno == errno.ELOOP else ""
        raise UnsafeArchive(f"{what}: entry {rel!r} needs a folder where the archive put a file "
                            f"or a link{loop}") from None


def _link(root: Path, rel: str, target: str, what: str) -> None:
    _check_link(rel, target, what)
    dest = _prepare(root, rel, what)
    os.symlink(target, dest)
    if not _inside(root, dest):  # lexically inside, really outside through a link made before it
        raise UnsafeArchive(f"{what}: link {rel!r} → {target!r} escapes the tree")


def _prepare(root: Path, rel: str, what: str) -> Path:
    dest = root / rel
    if not _inside(root, dest.parent):
        raise UnsafeArchive(f"{what}: entry {rel!r} would be written through a link outside the tree")
    _folder(dest.parent, rel, what)
    if not _inside(root, dest.parent):
        raise UnsafeArchive(f"{what}: entry {rel!r} would be written through a link outside the tree")
    if dest.is_symlink() or dest.exists():
        raise UnsafeArchive(f"{what}: entry {rel!r} appears twice")
    return dest


def _write_stream(src: IO[bytes], dest: Path, budget: _Budget, rel: str, mode: int) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = src.read(MiB)
            if not chunk:
                break
            budget.add(len(chunk), rel)
            out.write(chunk)


def _final_check(root: Path, what: str) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink() and not _inside(root, p):
                raise UnsafeArchive(f"{what}: link {p.relative_to(root)} escapes the tree")


def unpack_tar(archive: Path, dest: Path, caps: Caps = Caps()) -> None:
    unpack_layers([archive], dest, caps)


def unpack_layers(archives: Sequence[Path], dest: Path, caps: Caps = Caps()) -> None:
    """Tar archives unpacked in order into one tree (an image's layers): ``caps`` are the
    tree's, counted across every archive, never each archive's alone."""
    budget = _Budget(caps, "")
    dest.mkdir(parents=True, exist_ok=True)
    for archive in archives:
        budget.what = archive.name
        _tar_into(archive, dest, budget)
        _final_check(dest, archive.name)


def _tar_into(archive: Path, dest: Path, budget: _Budget) -> None:
    what, caps = budget.what, budget.caps
    try:
        tf = tarfile.open(archive, mode="r:*")
    except (tarfile.TarError, OSError) as exc:
        raise UnsafeArchive(f"{what}: not a readable tar archive ({exc})") from None
    with tf:
        try:
            for member in tf:
                budget.entry(member.name)
                rel = safe_name(member.name, what)
                if not rel or rel.split("/")[0] == ".git" or "/.git/" in f"/{rel}/":
                    continue
                if member.isdir():
                    _mkdir(dest, rel, what)
                elif member.issym():
                    _link(dest, rel, member.linkname, what)
                elif member.islnk():
                    raise UnsafeArchive(f"{what}: hard link {rel!r} refused")
                elif member.isreg():
                    if member.size > caps.max_bytes:
                        raise UnsafeArchive(f"{what}: entry {rel!r} declares {member.size} bytes, "
                                            "over the cap")
                    src = tf.extractfile(member)
                    if src is None:
                        raise UnsafeArchive(f"{what}: cannot read {rel!r}")
                    _write_stream(src, _prepare(dest, rel, what), budget, rel, member.mode)
                else:
                    raise UnsafeArchive(f"{what}: {rel!r} is a device, FIFO or other special file")
        except tarfile.TarError as exc:
            raise UnsafeArchive(f"{what}: corrupt tar archive ({exc})") from None


def unpack_zip(archive: Path, dest: Path, caps: Caps = Caps()) -> None:
    what = archive.name
    budget = _Budget(caps, what)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnsafeArchive(f"{what}: not a readable zip archive ({exc})") from None
    with zf:
        for info in zf.infolist():
            budget.entry(info.filename)
            rel = safe_name(info.filename, what)
            if not rel or rel.split("/")[0] == ".git" or "/.git/" in f"/{rel}/":
                continue
            mode = info.external_attr >> 16
            if info.is_dir():
                _mkdir(dest, rel, what)
                continue
            if stat.S_ISLNK(mode):
                if info.file_size > 4096:
                    raise UnsafeArchive(f"{what}: link {rel!r} target is too long")
                _link(dest, rel, zf.read(info).decode("utf-8", "replace"), what)
                continue
            if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                raise UnsafeArchive(f"{what}: {rel!r} is a device, FIFO or other special file")
            try:
                with zf.open(info) as src:
                    _write_stream(src, _prepare(dest, rel, what), budget, rel, mode)
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
                raise UnsafeArchive(f"{what}: cannot read {rel!r} ({exc})") from None
    _final_check(dest, what)


def read_files(data: bytes, caps: Caps = Caps(), *, what: str, only: Callable[[str], bool] | None = None,
               max_file: int | None = None, strict: bool = False) -> dict[str, bytes]:
    """The regular files of an untrusted archive (tar, any compression, or zip) read in memory,
    by their :func:`safe_name`: nothing is written to disk. The rules of :func:`unpack`: every
    name checked (absolute, ``..``, NUL refused), entries counted and bytes counted as read
    (``caps``; a lying header stops at the cap). Links, devices and folders are skipped, never
    followed (nothing is on disk to follow them to). ``only(name)`` selects the files to read
    (the rest are counted, not read); ``max_file`` refuses one selected file larger than it.
    ``strict`` is for formats that hold only files (a ``.wbundle``): a link, special file or
    folder entry, a name not in canonical form (``./x``, ``a//b``) and a name seen twice are
    refused instead of skipped (two readers could disagree on which copy is the file)."""
    import io

    budget = _Budget(caps, what)
    out: dict[str, bytes] = {}
    seen: set[str] = set()

    def files_only(raw: str, rel: str, kind: str | None) -> None:
        if kind is not None:
            raise UnsafeArchive(f"{what}: entry {rel!r} is {kind}; this archive may hold only files")
        if rel != raw:
            raise UnsafeArchive(f"{what}: entry {raw!r} is not in canonical form (expected {rel!r})")
        if rel in seen:
            raise UnsafeArchive(f"{what}: entry {rel!r} appears twice")
        seen.add(rel)

    def take(rel: str, size: int, src: IO[bytes] | None) -> None:
        if max_file is not None and size > max_file:
            raise UnsafeArchive(f"{what}: {rel!r} has {size} bytes, over the {max_file}-byte cap")
        if src is None:
            raise UnsafeArchive(f"{what}: cannot read {rel!r}")
        limit = caps.max_bytes - budget.bytes + 1
        chunk = src.read(min(limit, max_file + 1 if max_file is not None else limit))
        budget.add(len(chunk), rel)
        if max_file is not None and len(chunk) > max_file:
            raise UnsafeArchive(f"{what}: {rel!r} is over the {max_file}-byte cap")
        out[rel] = chunk

    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise UnsafeArchive(f"{what}: not a readable zip archive ({exc})") from None
        with zf:
            for info in zf.infolist():
                budget.entry(info.filename)
                rel = safe_name(info.filename, what)
                mode = info.external_attr >> 16
                if strict:
                    files_only(info.filename, rel, "a folder" if info.is_dir() else "a link or special file"
                               if stat.S_IFMT(mode) and not stat.S_ISREG(mode) else None)
                if not rel or info.is_dir() or (stat.S_IFMT(mode) and not stat.S_ISREG(mode)):
                    continue
                if only is not None and not only(rel):
                    continue
                try:
                    with zf.open(info) as src:
                        take(rel, info.file_size, src)
                except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
                    raise UnsafeArchive(f"{what}: cannot read {rel!r} ({exc})") from None
        return out
    try:
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as exc:
        raise UnsafeArchive(f"{what}: not a readable archive ({exc})") from None
    with tf:
        try:
            for member in tf:
                budget.entry(member.name)
                rel = safe_name(member.name, what)
                if strict:
                    files_only(member.name, rel, None if member.isreg() else
                               "a folder" if member.isdir() else "a link or special file")
                if not rel or not member.isreg() or (only is not None and not only(rel)):
                    continue
                take(rel, member.size, tf.extractfile(member))
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise UnsafeArchive(f"{what}: corrupt archive ({exc})") from None
    return out


def is_archive(name: str) -> bool:
    return name.endswith((".tar.gz", ".tgz", ".tar", ".tar.xz", ".tar.bz2", ".zip"))


def unpack(archive: Path, dest: Path, caps: Caps = Caps(), *, name: str | None = None) -> None:
    """Unpack by file type (zip by magic bytes, else tar with any compression)."""
    with archive.open("rb") as fh:
        magic = fh.read(4)
    if magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        unpack_zip(archive, dest, caps)
    else:
        unpack_tar(archive, dest, caps)


def copy_tree(src: Path, dest: Path, caps: Caps = Caps()) -> None:
    """Copy a folder with the same rules as an archive (links kept only if they stay inside).

    Read through :func:`wbcore_runtime.guard.paths.walk` (``openat`` with ``O_NOFOLLOW``, each
    file checked on the descriptor it is read from): a file or folder swapped for a link while
    the copy runs is refused, never followed, and so are hard links, FIFOs and devices."""
    what = str(src)
    budget = _Budget(caps, what)
    if not src.is_dir():
        raise InvalidArgs(f"{src} is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    for node in paths.walk(src, label=what, skip_dirs=frozenset({".git"}), max_files=caps.max_files):
        budget.entry(node.rel)
        if node.kind == "link":
            _check_link(node.rel, node.target, what)
            if not _inside(src, src / node.rel):
                raise UnsafeArchive(f"{what}: link {node.rel!r} escapes the tree")
            _link(dest, node.rel, node.target, what)
        elif node.kind == "empty":
            _prepare(dest, node.rel, what).mkdir()
        else:
            with os.fdopen(os.dup(node.fd), "rb") as fh:
                _write_stream(fh, _prepare(dest, node.rel, what), budget, node.rel,
                              0o755 if node.executable else 0o644)
    _final_check(dest, what)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
