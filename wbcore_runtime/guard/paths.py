"""Containment: the one function that decides whether a path read on behalf of a toolkit
stays inside its root.

Toolkit roots are unauthenticated, writable folders, so every file the core (or a plugin)
reads for a toolkit — its manifest, its skills folder and skills, a ``path:`` source, a
shipped artifact, a ``#+WIT`` folder — is resolved here, one component at a time:

- the path asked for is relative, without ``..`` and without NUL;
- each component is ``lstat``-ed once; a symlink is followed only while its target stays
  inside the root (its text is resolved the same way, at most 40 hops), so a link to a
  file or a folder outside is refused wherever it sits on the way;
- a file must be a regular file (never a FIFO, a device or a socket) with one hard link
  (a second name could be a file outside the root, and nothing on disk says which);
- opening a file uses ``O_NOFOLLOW`` and then checks that the open file is the very inode
  that was checked, so a swap between the check and the open cannot escape either.

Every refusal is a :class:`Refused` whose message is ``<file>: <reason>``, e.g.
``toolkits/evil/manifest.org: symlink to a file outside the toolkit root``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Literal

from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError
from wbcore_runtime.contract.frozen import Frozen, set_fields

#: The kernel's own bound on symlink hops (``ELOOP``).
MAX_SYMLINK_HOPS = 40
TOOLKIT_ROOT = "the toolkit root"
SEARCH_ROOT = "the search root"

Expect = Literal["file", "dir", "any"]

_OPEN_FLAGS = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOCTTY", 0))


class Refused(InvalidArgs):
    """A read on behalf of a toolkit that would leave its root, or a file that may not be read."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class Root(Frozen):
    """A folder that reads are confined to: ``shown`` names paths in messages, ``real`` is
    its symlink-free location (every walk starts there), ``label`` names it in refusals."""

    __slots__ = __match_args__ = ("shown", "real", "label")
    shown: Path
    real: str
    label: str

    def __init__(self, shown: Path, real: str, label: str = TOOLKIT_ROOT) -> None:
        set_fields(self, shown=shown, real=real, label=label)

    @classmethod
    def at(cls, path: Path | str, label: str = TOOLKIT_ROOT) -> Root:
        """The root at ``path`` (trusted: the caller chose it; only what is below is checked)."""
        return cls(Path(path), os.path.realpath(path), label)

    def resolve(self, relative: str, expect: Expect = "file") -> tuple[str, os.stat_result]:
        """The symlink-free path of ``relative`` and its ``lstat``, or :class:`Refused` /
        :class:`~wbcore_runtime.contract.errors.NotFound` saying why not."""
        real, st = self._walk(relative, expect)
        _check_kind(self.shown / relative if relative else self.shown, st, expect)
        return real, st

    def stays_inside(self, relative: str) -> bool:
        """Whether every step of ``relative`` (through its symlinks) stays inside the root,
        whatever it names; a path that ends at nothing inside the root stays inside."""
        try:
            self._walk(relative, "any")
        except NotFound:
            return True
        except Refused:
            return False
        return True

    def _walk(self, relative: str, expect: Expect) -> tuple[str, os.stat_result]:
        shown = self.shown / relative if relative else self.shown
        if "\x00" in relative:
            raise Refused(shown, "a NUL byte in the path")
        if os.path.isabs(relative):
            raise Refused(shown, f"an absolute path; give one relative to {self.label}")
        asked = [p for p in relative.split("/") if p not in ("", ".")]
        if ".." in asked:
            raise Refused(shown, f"'..' escapes {self.label}")
        # Work list, next item last: (name, the path to name if it is refused, what it must be).
        pending: list[tuple[str, Path, str]] = []
        where = self.shown
        for i, part in enumerate(asked):
            where = where / part
            pending.append((part, where, _noun(i == len(asked) - 1, expect)))
        pending.reverse()
        cur = self.real
        st: os.stat_result | None = None  # of cur, once known; the root is trusted and not re-checked
        hops = 0
        while pending:
            name, at, noun = pending.pop()
            if name == "..":  # only from a link's text; cur is symlink-free, so its parent is real
                if cur == self.real:
                    raise Refused(at, f"symlink to a {noun} outside {self.label}")
                cur = os.path.dirname(cur)
                st = None
                continue
            nxt = os.path.join(cur, name)
            try:
                st = os.lstat(nxt)
            except FileNotFoundError:
                raise NotFound(f"{at}: does not exist") from None
            except OSError as exc:
                raise Refused(at, f"cannot read ({exc.strerror})") from None
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise Refused(at, f"more than {MAX_SYMLINK_HOPS} symlinks on the way")
                try:
                    target = os.readlink(nxt)
                except OSError as exc:  # replaced between the lstat and here
                    raise Refused(at, f"cannot read the link ({exc.strerror})") from None
                if os.path.isabs(target):
                    norm = os.path.normpath(target)
                    # The rstrip keeps a root of "/" working too.
                    if norm != self.real and not norm.startswith(self.real.rstrip(os.sep) + os.sep):
                        raise Refused(at, f"symlink to a {noun} outside {self.label}")
                    cur = self.real
                    target = os.path.relpath(norm, self.real)
                parts = [p for p in target.split("/") if p not in ("", ".")]
                pending.extend((p, at, noun) for p in reversed(parts))
                if not parts:  # a link to "." names its own folder
                    st = None
                continue
            if pending and not stat.S_ISDIR(st.st_mode):
                raise Refused(at, "not a folder")
            cur = nxt
        if st is None:  # the path names the root, or a folder reached through ".." or "."
            try:
                st = os.lstat(cur)
            except OSError as exc:
                raise NotFound(f"{shown}: {exc.strerror}") from None
        return cur, st

    def inside(self, relative: str, expect: Expect = "file") -> Path:
        """:meth:`resolve`, as a ``Path``."""
        return Path(self.resolve(relative, expect)[0])

    def folder(self, relative: str, label: str) -> Root:
        """The folder at ``relative`` as a root of its own (e.g. a toolkit's ``skills/``)."""
        real, _ = self.resolve(relative, "dir")
        return Root(self.shown / relative, real, label)

    def open(self, relative: str) -> BinaryIO:
        """The regular file at ``relative``, opened for reading: the file that was checked."""
        real, st = self.resolve(relative, "file")
        shown = self.shown / relative
        try:
            fd = os.open(real, _OPEN_FLAGS)
        except OSError as exc:
            # ELOOP: the last component became a symlink after the check.
            raise Refused(shown, f"cannot open ({exc.strerror})") from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise Refused(shown, "replaced while it was being opened")
            _check_kind(shown, now, "file")
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def read(self, relative: str, max_bytes: int) -> bytes:
        """Every byte of the file at ``relative``; over ``max_bytes`` is :class:`Refused`."""
        with self.open(relative) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise Refused(self.shown / relative, f"{size} bytes is over the {max_bytes}-byte cap")
            data = fh.read(max_bytes + 1)  # the file may grow after fstat: the cap holds while reading
        if len(data) > max_bytes:
            raise Refused(self.shown / relative, f"over the {max_bytes}-byte cap")
        return data


def _noun(last: bool, expect: Expect) -> str:
    if not last or expect == "dir":
        return "folder"
    return "file" if expect == "file" else "path"


def _check_kind(shown: Path, st: os.stat_result, expect: Expect) -> None:
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        if expect == "file":
            raise Refused(shown, "a folder, not a regular file")
        return
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise Refused(shown, f"{kind}, not a regular file")
    if expect == "dir":
        raise Refused(shown, "a file, not a folder")
    if st.st_nlink > 1:
        raise Refused(shown, f"has {st.st_nlink} hard links (another name may be outside the toolkit; "
                             "copy the file instead)")


def inside(root: Path | str, relative: str, *, expect: Expect = "file", label: str = TOOLKIT_ROOT) -> Path:
    """The symlink-free path of ``root/relative`` when it stays inside ``root`` (see the module)."""
    return Root.at(root, label).inside(relative, expect)


def open_file(root: Path | str, relative: str, *, label: str = TOOLKIT_ROOT) -> BinaryIO:
    """Open the regular file ``root/relative`` for reading, through :func:`inside`."""
    return Root.at(root, label).open(relative)


def read_file(root: Path | str, relative: str, max_bytes: int, *, label: str = TOOLKIT_ROOT) -> bytes:
    """Read the regular file ``root/relative`` through :func:`inside`, at most ``max_bytes``."""
    return Root.at(root, label).read(relative, max_bytes)


# --- walking a whole tree, anchored to open folders --------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

Kind = Literal["file", "link", "empty"]


class Node(Frozen):
    """One thing :func:`walk` found: a regular ``file`` (``fd`` open on the very inode that
    was checked; the walk closes it when the consumer asks for the next node), a ``link``
    (``target`` is its text, never followed) or an ``empty`` folder."""

    __slots__ = __match_args__ = ("rel", "kind", "fd", "target", "executable")
    rel: str
    kind: Kind
    fd: int
    target: str
    executable: bool

    def __init__(self, rel: str, kind: Kind, fd: int = -1, target: str = "",
                 executable: bool = False) -> None:
        set_fields(self, rel=rel, kind=kind, fd=fd, target=target, executable=executable)


def walk(root: Path | str, *, label: str = TOOLKIT_ROOT, skip_dirs: frozenset[str] = frozenset(),
         max_files: int = 20_000, skip_hidden: bool = False) -> Iterator[Node]:
    """Every file, link and empty folder under ``root``, each folder's files and links first
    (sorted by name), then its subfolders (sorted), depth first — the order
    :func:`wbcore_runtime.build.cache.tree_digest` hashes in.

    The walk never goes through a path string below ``root``: each folder is opened with
    ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's descriptor and each file with
    ``O_NOFOLLOW`` relative to its folder's (``openat``), so a folder swapped for a symlink
    while the walk runs is refused (``ELOOP``/``ENOTDIR``), never followed out. What is opened
    is checked by the same rule as :meth:`Root.open` (a regular file with one link; FIFOs,
    devices and sockets refused). Links are yielded as text; whether they stay inside is
    the consumer's question (ask :meth:`Root.stays_inside` of a copy nobody else writes).
    Folders named in ``skip_dirs`` are left out at every depth, and with ``skip_hidden`` so is
    every name starting with ``.`` (files and folders: a ``.git`` is never entered)."""
    shown = Path(root)
    try:
        top = os.open(os.path.realpath(root), _DIR_FLAGS)
    except OSError as exc:
        raise Refused(shown, f"cannot open the folder ({exc.strerror})") from None
    count = [0]
    try:
        yield from _walk_fd(top, "", shown, label, skip_dirs, max_files, count, skip_hidden)
    finally:
        os.close(top)


def _walk_fd(dfd: int, prefix: str, shown: Path, label: str, skip: frozenset[str], max_files: int,
             count: list[int], skip_hidden: bool = False) -> Iterator[Node]:
    try:
        names = sorted(n for n in os.listdir(dfd) if not (skip_hidden and n.startswith(".")))
    except OSError as exc:
        raise Refused(shown / prefix, f"cannot list the folder ({exc.strerror})") from None
    if prefix and not names:
        yield Node(prefix.rstrip("/"), "empty")
        return
    subdirs: list[str] = []
    for name in names:
        rel = prefix + name
        count[0] += 1
        if count[0] > max_files:
            raise Refused(shown, f"more than {max_files} files in {label}")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError as exc:
            raise Refused(shown / rel, f"cannot read ({exc.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            if name not in skip:
                subdirs.append(name)
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(name, dir_fd=dfd)
            except OSError as exc:  # replaced between the lstat and here
                raise Refused(shown / rel, f"cannot read the link ({exc.strerror})") from None
            yield Node(rel, "link", target=target)
            continue
        _check_kind(shown / rel, st, "file")
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=dfd)
        except OSError as exc:  # ELOOP: it became a symlink after the lstat
            raise Refused(shown / rel, f"cannot open ({exc.strerror})") from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise Refused(shown / rel, "replaced while it was being read")
            _check_kind(shown / rel, now, "file")
            yield Node(rel, "file", fd=fd, executable=bool(now.st_mode & 0o111))
        finally:
            os.close(fd)
    for name in subdirs:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except OSError as exc:  # ELOOP/ENOTDIR: swapped for a link or a file after the listing
            raise Refused(shown / (prefix + name), f"cannot open the folder ({exc.strerror}); "
                          f"was it replaced while {label} was being read?") from None
        try:
            yield from _walk_fd(sub, prefix + name + "/", shown, label, skip, max_files, count, skip_hidden)
        finally:
            os.close(sub)


# --- host folders a deployer grants to a sandbox (wbx run/shell --mount) --------------------

#: Host folders never granted, nor any folder inside them: the kernel's own views and
#: devices (a mount of them is a device grant, not a folder of files).
HOST_SYSTEM = ("/proc", "/sys", "/dev", "/run")
HOST_LABEL = "the host"


def lexically_within(path: str | Path, base: str | Path) -> bool:
    """Whether ``path``, normalised as written (no disk access, no link followed), is
    ``base`` or below it. Only a pre-check that says nothing of what exists (a remote
    mount outside ``WB_MOUNT_ROOTS`` is refused before the disk is asked); what is then
    granted is decided by :meth:`Root.resolve` on the real folder."""
    return os.path.isabs(path) and Path(os.path.normpath(path)).is_relative_to(base)


def in_roots(path: str, roots: Sequence[Root], *, resolved: bool) -> bool:
    """Whether host folder ``path`` lies in one of ``roots`` (``WB_MOUNT_ROOTS``). Before the disk
    is asked (``resolved=False``): as written, against each root as given or resolved, so a
    refusal says nothing of what exists outside. After :func:`host_folder` (``resolved=True``):
    the root's own walk (:meth:`Root.resolve`, no link out) must reach exactly ``path``."""
    for root in roots:
        if not resolved and lexically_within(path, root.shown):
            return True
        if not lexically_within(path, root.real):
            continue
        if not resolved:
            return True
        rel = os.path.relpath(path, root.real)
        try:
            if root.resolve("" if rel == os.curdir else rel, "dir")[0] == path:
                return True
        except WbError:
            continue
    return False


def host_folder(path: str, *, home: Path | str | None = None, what: str = "--mount") -> str:
    """The symlink-free path of the host folder ``path`` that a deployer grants to a sandbox
    (``--mount``), or :class:`Refused` / :class:`~wbcore_runtime.contract.errors.NotFound` saying why
    not. It is walked from ``/`` by the rule of :class:`Root` (one component at a time, at most
    :data:`MAX_SYMLINK_HOPS` symlinks, each ``lstat``-ed), so what is granted is the folder the
    links named at this moment, never a link a tier would follow later; it must be a folder
    (not a device, FIFO or socket), not ``/``, not inside :data:`HOST_SYSTEM`, and neither
    inside ``home`` (its keys, grants and stores) nor a folder that contains it."""
    shown = f"{what} {path}"
    if not path or "\x00" in path:
        raise Refused(shown, "an empty path or a NUL byte; give a host folder, e.g. ./repo")
    absolute = os.path.abspath(path)
    try:
        real, _ = Root(Path("/"), "/", HOST_LABEL).resolve(absolute.lstrip("/"), "dir")
    except NotFound:
        raise NotFound(f"{shown}: {absolute} does not exist; give an existing host folder") from None
    if real == "/":
        raise Refused(shown, "the whole host file system; mount the folder the command needs")
    for system in HOST_SYSTEM:
        if real == system or real.startswith(system + "/"):
            raise Refused(shown, f"{real} is inside {system}, the kernel's own view of devices and "
                          "processes; mount a folder of files")
    if home is not None:
        home_real = os.path.realpath(home)
        if real == home_real or real.startswith(home_real + "/"):
            raise Refused(shown, f"{real} is inside the wbcore home {home_real} (keys, grants, stores); "
                          "copy what the command needs to a folder of its own")
        if home_real.startswith(real.rstrip("/") + "/"):
            raise Refused(shown, f"{real} contains the wbcore home {home_real} (keys, grants, stores); "
                          "mount a folder beside it instead")
    return real
