"""Safe archive extraction (tar, tar.gz/bz2/xz, zip).

Nothing lands outside the target folder: absolute names, ``..`` parts, hard links,
devices and FIFOs are refused; a symbolic link is kept only when its target stays inside
the archive's tree; every file is written through a path that is checked again after
resolving. Bytes and files are counted as they are written (never trusted from headers),
against caps. Modes are 0644 or 0755: no setuid, no setgid, no sticky bits.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wbcore.errors import InvalidArgs


@dataclass(frozen=True, slots=True)
class UnpackLimits:
    max_bytes: int = 512 << 20
    max_files: int = 20_000
    max_name: int = 1024


class _Budget:
    def __init__(self, limits: UnpackLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self.files = 0

    def file(self) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise InvalidArgs(f"archive has more than {self.limits.max_files} entries")

    def add(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.limits.max_bytes:
            raise InvalidArgs(f"archive unpacks to more than {self.limits.max_bytes} bytes")


def _clean(name: str, limits: UnpackLimits) -> str | None:
    """The member's safe relative path, None for the root itself, or an error."""
    if len(name) > limits.max_name or "\x00" in name:
        raise InvalidArgs(f"archive member name is too long or has a NUL: {name[:80]!r}")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\\" in name:
        raise InvalidArgs(f"archive member {name!r} has an absolute or Windows path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidArgs(f"archive member {name!r} climbs out with '..'")
    return "/".join(parts) or None


def _target(root: Path, rel: str) -> Path:
    """``root/rel`` with its folder resolved (through links already unpacked) and checked."""
    real_root = Path(os.path.realpath(root))
    parent = Path(os.path.realpath(root / posixpath.dirname(rel)))
    if parent != real_root and real_root not in parent.parents:
        raise InvalidArgs(f"archive member {rel!r} would land outside the archive's folder")
    return parent / posixpath.basename(rel)


def _write(root: Path, rel: str, src: IO[bytes], executable: bool, budget: _Budget) -> None:
    budget.file()
    dest = _target(root, rel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o755 if executable else 0o644)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = src.read(1 << 16)
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)


def _mkdir(root: Path, rel: str, budget: _Budget) -> None:
    budget.file()
    dest = _target(root, rel)
    dest.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or not dest.is_dir():
        raise InvalidArgs(f"archive folder {rel!r} collides with a file or link")


def _link(root: Path, rel: str, target: str, budget: _Budget) -> None:
    budget.file()
    if target.startswith("/"):
        raise InvalidArgs(f"archive link {rel!r} points to an absolute path {target!r}")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        raise InvalidArgs(f"archive link {rel!r} -> {target!r} escapes the archive")
    dest = _target(root, rel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, dest)


def unpack(archive: Path, root: Path, limits: UnpackLimits | None = None) -> None:
    """Unpack ``archive`` into the (empty) folder ``root``."""
    limits = limits or UnpackLimits()
    budget = _Budget(limits)
    root.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                rel = _clean(info.filename, limits)
                if rel is None:
                    continue
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise InvalidArgs(f"archive member {rel!r} is a link; zip links are not unpacked")
                if info.is_dir():
                    _mkdir(root, rel, budget)
                    continue
                with zf.open(info) as src:
                    _write(root, rel, src, bool(mode & 0o111), budget)
        return
    try:
        tf = tarfile.open(archive, mode="r:*")
    except tarfile.TarError as exc:
        raise InvalidArgs(f"{archive.name} is not a tar or zip archive: {exc}") from None
    with tf:
        for member in tf:
            rel = _clean(member.name, limits)
            if rel is None:
                continue
            if member.isdir():
                _mkdir(root, rel, budget)
            elif member.isfile():
                src = tf.extractfile(member)
                assert src is not None
                _write(root, rel, src, bool(member.mode & 0o111), budget)
            elif member.issym():
                _link(root, rel, member.linkname, budget)
            elif member.islnk():
                raise InvalidArgs(f"archive member {rel!r} is a hard link; refused")
            else:
                raise InvalidArgs(f"archive member {rel!r} is a device or FIFO; refused")
