"""What a killed process leaves behind: temp folders and files named after their owner, swept once it is dead.

Every temp folder or file wbcore creates for a job that may be killed (install staging,
build work folders, the build sandbox's scratch root, artifact and cache temp files) is
named ``<prefix><pid>-<start>-<random><suffix>``: the owning process id and its start
time (clock ticks since boot, ``/proc/<pid>/stat`` field 22), so a recycled pid is never
taken for the owner. :func:`sweep` removes an entry only when its owner is provably gone
(no such pid, or a pid with another start time); a live process's folder and any name it
cannot read are left alone. :func:`sweep_home` runs at the start of every ``wbx`` command
after the installer (wbcore-install, ``contract.installs.Installer.recover``) has finished or
undone an install a kill interrupted. When nothing is left over it reads and never writes, so a
pure-compute ``wbx run`` does not touch the disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

#: Temp-folder prefixes in the system temp dir that are swept (the build sandbox's scratch roots,
#: the os_process tier's worker scratch folders).
SYSTEM_TEMP_PREFIXES = ("wb-sbx-", "wb-spawn-")
#: Marks a temp file of an atomic write (``.<name>.wbtmp-<owner>.tmp``).
TMP_MARK = ".wbtmp-"
#: Where things live under ``$WB_HOME`` (the installer, wbcore-install's ``wbcore_install.install``
#: and ``wbcore_install.journal``, and ``wbcore_runtime.store.artifacts`` use these names).
STAGING = ".staging"
STAGING_PREFIX = "install-"
JOURNAL = ".install-journal.json"
ARTIFACT_TMP = ".tmp"  # under the artifact store
_OWNER_RE = re.compile(r"(\d+)-(\d+)-[0-9a-z]+")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields after it follow the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@cache
def _my_tag(pid: int) -> str:
    return f"{pid}-{start_time(pid) or 0}"


def owner_tag() -> str:
    """``<pid>-<start>`` of this process (recomputed after a fork)."""
    return _my_tag(os.getpid())


def unique(prefix: str, suffix: str = "") -> str:
    """A fresh name carrying this process as its owner."""
    import secrets

    return f"{prefix}{owner_tag()}-{secrets.token_hex(4)}{suffix}"


def system_tmp() -> Path:
    """The system temp folder :func:`mkdtemp` uses and :func:`sweep_home` sweeps: the first
    of ``$TMPDIR``, ``$TEMP``, ``$TMP`` and ``/tmp`` that is a folder this process may
    write, else tempfile's choice. Both use this one function, so they always agree; it
    does not import tempfile (and shutil, bz2, lzma, random) on every command's start."""
    for cand in (os.environ.get("TMPDIR"), os.environ.get("TEMP"), os.environ.get("TMP"), "/tmp"):
        if cand and os.path.isdir(cand) and os.access(cand, os.W_OK | os.X_OK):
            return Path(os.path.abspath(cand))
    import tempfile

    return Path(tempfile.gettempdir())


def mkdtemp(prefix: str, dir: Path | str | None = None) -> Path:
    """``tempfile.mkdtemp`` with the owner in the name (mode 0700)."""
    base = Path(dir) if dir is not None else system_tmp()
    for _ in range(100):
        path = base / unique(prefix)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free temp name under {base}")


def old_prefix(dest: Path) -> str:
    """The name prefix :func:`replace_dir` gives the folder it moves aside (for :func:`sweep`)."""
    return f".{dest.name}.old-"


def replace_dir(new: Path, dest: Path) -> None:
    """Put the folder ``new`` where ``dest`` is (same file system). The old ``dest`` is
    renamed aside under an owner-tagged name (:func:`old_prefix`) and removed, so a kill in
    between leaves a folder :func:`sweep` knows, never a half-deleted ``dest``."""
    old = None
    if dest.exists():
        old = dest.with_name(unique(old_prefix(dest)))
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        import shutil

        shutil.rmtree(old, ignore_errors=True)


def owner_alive(name: str, prefix: str) -> bool | None:
    """Whether the owner named in ``name`` lives (None: the name carries no owner)."""
    m = _OWNER_RE.match(name[len(prefix) :]) if name.startswith(prefix) else None
    if m is None:
        return None
    pid, start = int(m.group(1)), int(m.group(2))
    now = start_time(pid)
    return now is not None and (start == 0 or now == start)


def _remove(path: Path) -> None:
    import shutil

    try:
        if path.is_dir() and not path.is_symlink():
            # A build's snapshot is read-only (wbcore_runtime.build.snapshot): open each
            # folder up before removing what is in it.
            for dirpath, dirnames, _files in os.walk(path):
                for d in dirnames:
                    if not os.path.islink(os.path.join(dirpath, d)):
                        os.chmod(os.path.join(dirpath, d), 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def sweep(folder: Path, prefix: str) -> list[Path]:
    """Remove the entries of ``folder`` named ``<prefix><owner>…`` whose owner is dead."""
    return _sweep(folder, lambda name: name.startswith(prefix) and owner_alive(name, prefix) is False)


def sweep_tmp_files(folder: Path) -> list[Path]:
    """Remove ``.<name>.wbtmp-<owner>….tmp`` files (atomic writes a kill interrupted) of dead owners."""
    return _sweep(folder, lambda name: (name.find(TMP_MARK) > 0 and name.endswith(".tmp")
                                        and owner_alive(name[name.find(TMP_MARK):], TMP_MARK) is False))


def _sweep(folder: Path, dead: Callable[[str], bool]) -> list[Path]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = [folder / name for name in names if dead(name)]
    for path in removed:
        _remove(path)
    return removed


def sweep_home(home: Path) -> list[Path]:
    """Sweep every dead process's leftovers. An interrupted install (its journal, :data:`JOURNAL`)
    is finished or undone first by the caller (wbcore-cli's ``open_runtime``, through
    ``contract.installs.service(runtime).recover``), as the installer is a plugin's."""
    removed: list[Path] = []
    if not home.is_dir():
        return removed
    removed += sweep(home / STAGING, STAGING_PREFIX)
    removed += sweep(home / "build" / "tmp", "build-")
    removed += sweep(home / "store" / "trees", ".tmp-")  # a tree being stored (wbcore_runtime.build.snapshot)
    # home/cache: the start-up caches (entry points, manifests, digests) write their temp files there.
    for sub in (home, home / "cache", home / "build" / "cache", home / "build" / "logs",
                home / "build" / "provenance", home / "artifacts" / ARTIFACT_TMP):
        removed += sweep_tmp_files(sub)
    for prefix in SYSTEM_TEMP_PREFIXES:
        removed += sweep(system_tmp(), prefix)
    return removed
