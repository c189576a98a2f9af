"""A workspace: a folder whose ``workspace.org`` names it, its HTML and the VFS instance it owns.

``workspace.org`` holds ``#+KEY: value`` lines (other lines are free text and kept)::

    #+WORKSPACE: notes            required; [A-Za-z0-9._-]{1,64}
    #+TITLE: Field notes          optional
    #+HTML: notes.html            optional; a regular file inside the folder
    #+VFS_INSTANCE: notes         optional; default: the WORKSPACE name
    #+VOLUMES: workspace memory tmp   optional; default: all three

The VFS instance's data lives in the VFS broker's database (``docs/dock.md``, "VFS on disk").
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs, NotFound

MANIFEST = "workspace.org"
MAX_MANIFEST_BYTES = 64 << 10
VOLUMES = ("workspace", "memory", "tmp")
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
INSTANCE_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_KW_RE = re.compile(r"^[ \t]*#\+([A-Za-z_]+):[ \t]*(.*?)[ \t]*$")


@dataclass(frozen=True, slots=True)
class Workspace:
    dir: Path
    name: str
    title: str
    html: str | None  # relative POSIX path inside dir
    instance: str
    volumes: tuple[str, ...]

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST


def _inside_name(rel: str, where: str) -> str:
    parts = rel.replace("\\", "/").split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgs(f"{where}: #+HTML {rel!r} must be a relative path inside the workspace (no '..')")
    return "/".join(parts)


def parse(text: str, dir: Path) -> Workspace:
    where = str(dir / MANIFEST)
    kw: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = _KW_RE.match(line)
        if not m:
            continue
        key = m.group(1).upper()
        if key in kw:
            raise InvalidArgs(f"{where}:{n}: #+{key} appears twice")
        kw[key] = m.group(2)
    name = kw.get("WORKSPACE", "")
    if not NAME_RE.match(name):
        raise InvalidArgs(f"{where}: #+WORKSPACE must name the workspace ([A-Za-z0-9._-]{{1,64}}), got "
                          f"{name!r}")
    instance = kw.get("VFS_INSTANCE") or name
    if not INSTANCE_RE.match(instance):
        raise InvalidArgs(f"{where}: #+VFS_INSTANCE {instance!r} must match {INSTANCE_RE.pattern}")
    vols = tuple(kw["VOLUMES"].split()) if kw.get("VOLUMES") else VOLUMES
    unknown = [v for v in vols if v not in VOLUMES]
    if unknown or len(set(vols)) != len(vols):
        raise InvalidArgs(f"{where}: #+VOLUMES must list distinct volumes among {', '.join(VOLUMES)} (got "
                          f"{kw['VOLUMES']!r})")
    html = _inside_name(kw["HTML"], where) if kw.get("HTML") else None
    return Workspace(dir, name, kw.get("TITLE", ""), html, instance, tuple(sorted(vols)))


def read_regular(path: Path, cap: int, what: str) -> bytes:
    """A regular file's bytes (no symlink followed), refused over ``cap``."""
    import os

    try:
        # O_NONBLOCK: a FIFO planted where a file is expected is refused below, not waited on.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise NotFound(f"{what}: {path} does not exist") from None
    except OSError as exc:
        raise InvalidArgs(f"{what}: cannot read {path} ({exc.strerror}; a symlink is not followed)") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InvalidArgs(f"{what}: {path} is not a regular file")
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise InvalidArgs(f"{what}: {path} is larger than {cap} bytes")
    return data


def load(dir: Path) -> Workspace:
    """The workspace at ``dir`` (a folder holding ``workspace.org``)."""
    if not (dir / MANIFEST).exists():
        raise NotFound(f"{dir} is not a workspace: it has no {MANIFEST} (see docs/bundles.md)")
    raw = read_regular(dir / MANIFEST, MAX_MANIFEST_BYTES, "workspace")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgs(f"{dir / MANIFEST}: not valid UTF-8") from None
    return parse(text, dir)
