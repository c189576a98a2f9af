"""Landing installed toolkits (``wbcore_install.install`` stages them): one journal, one commit point.

Before the first rename, the journal (``$WB_HOME/.install-journal.json``, written atomically)
lists every move and the new lockfile's temp name; old folders go aside into the staging
folder, new ones come in, and renaming the new lockfile into place is the commit point. The
next command that finds a journal (:func:`recover`, which wbcore-cli's ``open_runtime`` asks
the installer for at the start of every command; or :func:`home_lock`) rolls forward if the
lockfile was committed and otherwise rolls back every move it finds done, so the user root and
``wbx.lock`` always agree: all old, or all new.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard import unpack
from wbcore_runtime.store import faults, leftovers, locks
from wbcore_runtime.store.artifacts import fsync_dir, write_temp
from wbcore_install.lockfile import LOCKFILE, LockEntry, lock_bytes


#: How long an install waits for another holding the home (one fetching a large source may take
#: minutes; a suspended one would hold it for ever).
LOCK_WAIT_S = 600.0


@contextmanager
def home_lock(home: Path) -> Iterator[None]:
    """Hold ``home``'s install lock; a landing a kill interrupted is finished or undone first."""
    home.mkdir(parents=True, exist_ok=True)
    with locks.held(home / (LOCKFILE + ".lock"), what="install", wait_s=LOCK_WAIT_S):
        _recover_locked(home)
        yield


def _journal_path(home: Path) -> Path:
    return home / leftovers.JOURNAL


def _write_journal(home: Path, doc: dict[str, Any]) -> None:
    tmp = write_temp(_journal_path(home), json.dumps(doc, indent=1).encode())
    os.replace(tmp, _journal_path(home))
    fsync_dir(home)


def _rel(home: Path, path: Path | None) -> str | None:
    return None if path is None else os.path.relpath(path, home)


def _replay(home: Path, doc: dict[str, Any]) -> str:
    """Finish (lockfile committed) or undo (not committed) the journalled landing; returns which."""
    lock_tmp = home / doc["lock_tmp"]
    if not lock_tmp.exists():  # the lockfile was renamed into place: the new state is the state
        outcome = "rolled forward"
        for mv in doc["moves"]:
            aside = home / mv["aside"]
            if aside.exists() or aside.is_symlink():
                unpack.remove_tree(aside)
    else:
        outcome = "rolled back"
        for mv in reversed(doc["moves"]):
            target, aside = home / mv["target"], home / mv["aside"]
            new = home / mv["new"] if mv.get("new") else None
            if (new is not None and not (new.exists() or new.is_symlink())
                    and (target.exists() or target.is_symlink())):
                os.rename(target, new)  # the new folder had landed: take it back out
            if aside.exists() or aside.is_symlink():
                os.rename(aside, target)
        lock_tmp.unlink(missing_ok=True)
    if (home / "toolkits").is_dir():
        fsync_dir(home / "toolkits")
    _journal_path(home).unlink(missing_ok=True)
    fsync_dir(home)
    return outcome


def recover(home: Path) -> str | None:
    """Replay a journal a killed install left (under the install lock); None when there is none.

    Never waits: when another process holds the install lock, its landing is live, not
    interrupted, and is left to it.
    """
    jpath = _journal_path(home)
    if not jpath.exists():
        return None
    with open(home / (LOCKFILE + ".lock"), "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return _recover_locked(home)


def _recover_locked(home: Path) -> str | None:
    jpath = _journal_path(home)
    try:
        doc = json.loads(jpath.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:  # never half-written (write-then-rename); an unreadable one is not ours
        raise InvalidArgs(f"{jpath} is not an install journal; "
                          f"move it away and check {home / 'toolkits'}") from None
    return _replay(home, doc)


def land(home: Path, new: Mapping[str, Path], new_lock: Mapping[str, LockEntry], work: Path, *,
         replace: set[str], remove: tuple[str, ...] = ()) -> None:
    """Move the staged folders ``new`` (id → folder) in, ``remove`` out and ``new_lock`` into
    place, as one change; ``work`` (a staging folder) holds what goes aside until the commit."""
    root = home / "toolkits"
    root.mkdir(parents=True, exist_ok=True)
    moves: list[dict[str, str | None]] = []
    for ident, folder in new.items():
        target = root / ident
        if (target.exists() or target.is_symlink()) and ident not in replace:
            raise InvalidArgs(f"{target} exists (use --force to replace it)")
        moves.append({"id": ident, "new": _rel(home, folder), "target": _rel(home, target),
                      "aside": _rel(home, work / f"old-{ident}")})
    for ident in remove:
        moves.append({"id": ident, "new": None, "target": _rel(home, root / ident),
                      "aside": _rel(home, work / f"old-{ident}")})
    tmp_lock = write_temp(home / LOCKFILE, lock_bytes(new_lock))
    faults.point("land:prepared")
    doc = {"format": 1, "owner": leftovers.owner_tag(), "lock_tmp": _rel(home, tmp_lock), "moves": moves}
    try:
        _write_journal(home, doc)
        faults.point("land:journal")
        for i, mv in enumerate(moves):
            target = home / str(mv["target"])
            if target.exists() or target.is_symlink():
                os.rename(target, home / str(mv["aside"]))
                faults.point(f"land:aside-{i}")
            if mv["new"] is not None:
                os.rename(home / str(mv["new"]), target)
                faults.point(f"land:moved-{i}")
        os.replace(tmp_lock, home / LOCKFILE)  # the commit point
        faults.point("land:committed")
    except BaseException:
        if _journal_path(home).exists():
            _replay(home, doc)  # the same undo a later command would do
        tmp_lock.unlink(missing_ok=True)
        raise
    _replay(home, doc)
    faults.point("land:done")
