"""The persistent command and kernel registries (seed 000 "command", seed 004).

``name → artifact sha256, shape, toolkit, arg mode, profile`` in SQLite under
``$WB_HOME/registry.db``. Built-ins are reserved and cannot be shadowed; names match
``^[A-Za-z0-9_.-]+$``; at most 4096 dynamic entries. Every refusal says why.
"""

from __future__ import annotations

import json
import re
import threading
import time
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import InvalidArgs, NotFound, unknown_name
from wbcore_runtime.contract.frozen import Frozen, set_fields
from wbcore_runtime.store.generation import Generation

if TYPE_CHECKING:  # SQLite loads with the first query: a cached `wbx run` resolution makes none
    import sqlite3

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
RESERVED = frozenset({"upper", "jq", "grep", "wbox"})
MAX_DYNAMIC = 4096
MAX_NAME = 128
#: What the registry holds: commands, kernels, and typed components (by toolkit name).
KINDS = ("command", "kernel", "component")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    kind     TEXT NOT NULL,             -- 'command' or 'kernel'
    name     TEXT NOT NULL,
    sha256   TEXT NOT NULL,
    shape    TEXT NOT NULL,
    toolkit  TEXT,
    arg_mode TEXT NOT NULL DEFAULT 'argv',
    profile  TEXT NOT NULL DEFAULT 'compute',
    builtin  INTEGER NOT NULL DEFAULT 0,
    options  TEXT NOT NULL DEFAULT '{}',
    created  REAL NOT NULL,
    PRIMARY KEY (kind, name)
);
"""


#: ``Entry``'s default ``options``: a new dict each time.
_NEW_DICT: Any = object()


class Entry(Frozen):
    __slots__ = __match_args__ = ("kind", "name", "sha256", "shape", "toolkit", "arg_mode", "profile",
                                  "builtin", "options")
    _factories = {"options": dict}
    kind: str
    name: str
    sha256: str
    shape: str
    toolkit: str | None
    arg_mode: str
    profile: str
    builtin: bool
    options: Mapping[str, Any]

    def __init__(self, kind: str, name: str, sha256: str, shape: str, toolkit: str | None = None,
                 arg_mode: str = "argv", profile: str = "compute", builtin: bool = False,
                 options: Mapping[str, Any] = _NEW_DICT) -> None:
        set_fields(self, kind=kind, name=name, sha256=sha256, shape=shape, toolkit=toolkit, arg_mode=arg_mode,
                   profile=profile, builtin=builtin, options={} if options is _NEW_DICT else options)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "sha256": self.sha256, "shape": self.shape,
            "toolkit": self.toolkit, "arg_mode": self.arg_mode, "profile": self.profile,
            "builtin": self.builtin, "options": dict(self.options),
        }


_MISS = object()


class OwnedName(InvalidArgs):
    """A command name already belongs to another toolkit."""

    def __init__(self, kind: str, name: str, owner: str, claimant: str | None) -> None:
        who = claimant or "this entry"
        super().__init__(
            f"{kind} {name!r} belongs to toolkit {owner}; {who} may not take it. Rename #+CLI_BIN in {who}, "
            "or hand the name over explicitly (audited): "
            f"wbx toolkit build {claimant or '<id>'} --replace-command {name}")
        self.owner = owner


def name_key(name: str) -> str:
    """The one comparison of command names: NFKC-normalised, case-folded, without trailing dots.

    Two names with the same key look alike to a person and to an agent (``Upper``, ``UPPER``,
    ``upper.`` all read as ``upper``), so the registry lets one owner hold a key: the reserved
    built-ins own theirs, and a toolkit cannot register a look-alike of another toolkit's name."""
    return unicodedata.normalize("NFKC", name).casefold().rstrip(".")


_RESERVED_KEYS = {name_key(n): n for n in RESERVED}


class LookAlikeName(InvalidArgs):
    """A command name that reads as one owned by a built-in or by another toolkit."""

    def __init__(self, name: str, like: str, owner: str, claimant: str | None) -> None:
        who = claimant or "this entry"
        super().__init__(
            f"command {name!r} looks like {like!r} ({owner}): names are compared case-folded, "
            f"NFKC-normalised and without trailing dots. Rename #+CLI_BIN in {who} to a name "
            f"that does not read as {like!r}")
        self.like = like
        self.owner = owner


def check_name(name: str) -> str:
    if not name or len(name) > MAX_NAME or not NAME_RE.match(name):
        raise InvalidArgs(f"command name {name!r} must match {NAME_RE.pattern} (at most {MAX_NAME} chars)")
    return name


def _is_wal(path: Path) -> bool:
    """Whether the SQLite file at ``path`` is in WAL mode: its header's read/write format
    versions (bytes 18 and 19) are 2 (https://www.sqlite.org/fileformat.html)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18:20] == b"\x02\x02"


class CommandRegistry:
    """One SQLite file; each write is one transaction (old or new state, never torn)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._synced = False
        # Lookups are cached until the home's change counter moves (every registry write,
        # from any process, bumps it): a stat and a pread per lookup, no SQLite statement.
        self.generation = Generation(path.parent)
        self._cache: dict[tuple[str, str], Entry | None] = {}
        self._seen: int | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            import sqlite3

            self.path.parent.mkdir(parents=True, exist_ok=True)
            wal = _is_wal(self.path)
            conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
            # A rollback journal, not WAL: a reader then takes a lock and writes nothing
            # (WAL creates -wal/-shm files on every open), so a pure-compute run works on a
            # full or read-only home; writes (builds, installs) are rare and fully synced
            # (``synchronous=FULL`` is set by each write transaction, :meth:`_tx`). The
            # journal mode is persistent in the file: it is changed only for a home an
            # older version left in WAL mode, so a lookup runs no PRAGMA.
            if wal:
                try:
                    conn.execute("PRAGMA journal_mode=DELETE")
                except sqlite3.OperationalError:  # another connection holds the old WAL open: next time
                    pass
            conn.executescript(_SCHEMA)
            self._conn = conn
            self.generation.ensure()
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._db()
            if not self._synced:
                db.execute("PRAGMA synchronous=FULL")  # per connection, before its first write
                self._synced = True
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            else:
                db.execute("COMMIT")
                self.generation.bump()
            finally:
                self._cache.clear()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._synced = False

    def register(self, entry: Entry, *, replace: bool = True, take_from: str | None = None) -> Entry:
        """Register ``entry``. A name belongs to the toolkit that registered it: another
        toolkit may take it only when the deployer names the current owner in
        ``take_from`` (``wbx toolkit build B --replace-command NAME``); the caller audits it.
        """
        check_name(entry.name)
        if entry.kind not in KINDS:
            raise InvalidArgs(f"registry kind {entry.kind!r} is not one of {', '.join(KINDS)}")
        if not re.fullmatch(r"[0-9a-f]{64}", entry.sha256):
            raise InvalidArgs(f"artifact digest {entry.sha256!r} is not a sha256 hex digest")
        with self._tx() as db:
            row = db.execute("SELECT builtin, toolkit FROM entries WHERE kind=? AND name=?",
                             (entry.kind, entry.name)).fetchone()
            if entry.name in RESERVED and entry.kind == "command" and not entry.builtin:
                raise InvalidArgs(f"{entry.name!r} is a reserved built-in command and cannot be shadowed")
            if entry.kind == "command" and not entry.builtin:
                self._refuse_look_alike(db, entry, take_from)
            if row is not None and row[0] and not entry.builtin:
                raise InvalidArgs(f"{entry.name!r} is a built-in and cannot be shadowed")
            if row is not None and not replace:
                raise InvalidArgs(f"{entry.kind} {entry.name!r} is already registered")
            owner = row[1] if row is not None else None
            if owner and owner != entry.toolkit and take_from != owner:
                raise OwnedName(entry.kind, entry.name, owner, entry.toolkit)
            if row is None and not entry.builtin:
                (count,) = db.execute("SELECT COUNT(*) FROM entries WHERE builtin=0").fetchone()
                if count >= MAX_DYNAMIC:
                    raise InvalidArgs(f"registry is full: {MAX_DYNAMIC} dynamic entries is the limit")
            db.execute(
                "INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?)",
                (entry.kind, entry.name, entry.sha256, entry.shape, entry.toolkit, entry.arg_mode,
                 entry.profile, int(entry.builtin), json.dumps(dict(entry.options), sort_keys=True),
                 time.time()),
            )
        return entry

    @staticmethod
    def _refuse_look_alike(db: sqlite3.Connection, entry: Entry, take_from: str | None) -> None:
        """Refuse a command name whose :func:`name_key` is a reserved built-in's or another
        owner's (the same toolkit re-registering its own look-alike, or a deployer handing the
        owner's name over with ``take_from``, is not refused here)."""
        key = name_key(entry.name)
        reserved = _RESERVED_KEYS.get(key)
        if reserved is not None and reserved != entry.name:
            raise LookAlikeName(entry.name, reserved, "a reserved built-in command", entry.toolkit)
        for name, toolkit, builtin in db.execute(
                "SELECT name, toolkit, builtin FROM entries WHERE kind='command' AND name<>?", (entry.name,)):
            if name_key(name) != key:
                continue
            if builtin:
                raise LookAlikeName(entry.name, name, "a built-in command", entry.toolkit)
            if toolkit != entry.toolkit and take_from != toolkit:
                raise LookAlikeName(entry.name, name, f"owned by toolkit {toolkit}", entry.toolkit)

    def unregister(self, kind: str, name: str) -> None:
        with self._tx() as db:
            row = db.execute("SELECT builtin FROM entries WHERE kind=? AND name=?", (kind, name)).fetchone()
            if row is None:
                raise NotFound(unknown_name(kind, name, self.names(kind)))
            if row[0]:
                raise InvalidArgs(f"{name!r} is a built-in and cannot be removed")
            db.execute("DELETE FROM entries WHERE kind=? AND name=?", (kind, name))

    def owner(self, kind: str, name: str) -> str | None:
        """The toolkit that registered ``name`` (``None``: free, or a built-in)."""
        entry = self.lookup(kind, name)
        return entry.toolkit if entry is not None else None

    def lookup(self, kind: str, name: str) -> Entry | None:
        key = (kind, name)
        if self._conn is None:
            with self._lock:
                self._db()  # opens the database and creates the change counter
        seen = self.generation.value()
        if seen == self._seen:
            hit = self._cache.get(key, _MISS)
            if hit is not _MISS:
                return hit  # type: ignore[return-value]
        with self._lock:
            if seen != self._seen:
                self._cache.clear()
                self._seen = seen
            db = self._db()
            row = db.execute(
                "SELECT kind,name,sha256,shape,toolkit,arg_mode,profile,builtin,options FROM entries "
                "WHERE kind=? AND name=?",
                key,
            ).fetchone()
            entry = None if row is None else Entry(
                row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), json.loads(row[8]))
            if len(self._cache) < 8192:
                self._cache[key] = entry
        return entry

    def get(self, kind: str, name: str) -> Entry:
        entry = self.lookup(kind, name)
        if entry is None:
            raise NotFound(unknown_name(kind, name, self.names(kind)))
        return entry

    def names(self, kind: str) -> list[str]:
        with self._lock:
            rows = self._db().execute("SELECT name FROM entries WHERE kind=? ORDER BY name",
                                      (kind,)).fetchall()
        return [r[0] for r in rows]

    def entries(self, kind: str | None = None) -> list[Entry]:
        names = [(k, n) for k in ((kind,) if kind else KINDS) for n in self.names(k)]
        return [e for k, n in names if (e := self.lookup(k, n)) is not None]
