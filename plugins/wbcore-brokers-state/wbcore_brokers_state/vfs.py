"""The ``vfs`` cap: a per-instance SQLite VFS with three volumes, plus ``vfs-query``.

One database file per instance (``$WB_HOME/vfs/<instance>.db``), one table keyed by
``(volume, path)``: ``workspace`` (the working tree, persists), ``memory`` (long-term,
persists across freeze/resume) and ``tmp`` (scratch, cleared on resume). Opening an
existing instance database is a *resume*: the first open in a process clears ``tmp``.
``query`` is the raw vfs-query import: one read-only SELECT over ``files`` (it sees the
volume column), on a read-only connection with an authorizer that allows reading
``files`` and nothing else. A call's own instance (a Dock context made without a name,
``call-<owner>-…``) is released with its context: its database is closed and removed; one
a killed process left is swept when a broker opens the folder. Every answer is bounded while it is gathered (a
:class:`~wbcore_runtime.dispatch.budget.ByteBudget` of ``min(max_response, own cap)``): ``query`` under
the call's deadline, SQLite length and column limits and a per-row budget; ``list`` row
by row; ``read`` checks the blob's length in the statement that loads it.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, Timeout, WbError

from wbcore_brokers_state.kv import value_bytes

VOLUMES = ("workspace", "memory", "tmp")
MAX_FILE = 16 << 20
MAX_FILES = 10_000
MAX_ROWS = 1000
MAX_QUERY = 16 << 20  # vfs.query's own answer cap (the call's max_response may be lower)
QUERY_COLUMNS = 16  # widest row vfs.query builds: a row holds ≤ 16 values of ≤ cap/16 each
QUERY_SECONDS = 5.0
PROGRESS_STEPS = 1000  # SQLite VM steps between deadline checks (~tens of µs)
MAX_SQL = 64 << 10
MAX_PATH = 4096
OPEN_INSTANCES = 64
_INSTANCE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
  volume TEXT NOT NULL, path TEXT NOT NULL, data BLOB NOT NULL, size INTEGER NOT NULL, mtime REAL NOT NULL,
  PRIMARY KEY (volume, path)
) WITHOUT ROWID;
"""


def normalize(path: str) -> str:
    if "\0" in path or len(path) > MAX_PATH:
        raise InvalidArgs(f"vfs: path must be <= {MAX_PATH} characters without NUL")
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            raise InvalidArgs(f"vfs: path {path!r} may not contain '..'")
        parts.append(seg)
    if not parts:
        raise InvalidArgs("vfs: empty path")
    return "/".join(parts)


class VfsBroker:
    def __init__(self, root: Path, *, max_file: int = MAX_FILE, max_files: int = MAX_FILES,
                 max_query: int = MAX_QUERY, quota: Any = None) -> None:
        self.root = root
        self.quota = quota  # wbcore_brokers_state.quota.TenantQuota, or None
        self.max_file, self.max_files, self.max_query = max_file, max_files, max_query
        self._open: OrderedDict[str, Any] = OrderedDict()
        # instances opened by this broker: reopening one after it made room is not a resume
        self._opened: set[str] = set()
        self._lock = threading.Lock()
        from wbcore_runtime.store import leftovers
        from wbcore_runtime.dispatch.dock import EPHEMERAL_PREFIX

        leftovers.sweep(root, EPHEMERAL_PREFIX)  # databases (and -wal/-shm) of dead processes' calls

    def release(self, instance: str) -> None:
        """A call's own instance ended: close and remove its database (named instances stay)."""
        from wbcore_runtime.dispatch.dock import EPHEMERAL_PREFIX

        if not instance.startswith(EPHEMERAL_PREFIX) or not _INSTANCE.match(instance):
            return
        with self._lock:
            db = self._open.pop(instance, None)
            self._opened.discard(instance)
        if db is not None:
            db.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            (self.root / f"{instance}.db{suffix}").unlink(missing_ok=True)
        if self.quota is not None:
            self.quota.drop_scope(f"vfs:{instance}")

    def path_of(self, instance: str) -> Path:
        if not _INSTANCE.match(instance):
            raise InvalidArgs(f"vfs: instance id {instance!r} must match {_INSTANCE.pattern}")
        return self.root / f"{instance}.db"

    def db(self, instance: str) -> Any:
        from wbcore_brokers_state.db import Db

        with self._lock:
            db = self._open.get(instance)
            if db is not None:
                self._open.move_to_end(instance)
                return db
            path = self.path_of(instance)
            resumed = instance not in self._opened and path.exists()
            db = Db(path, SCHEMA)
            if resumed:
                self._clear_tmp(instance, db)
            self._opened.add(instance)
            self._open[instance] = db
            while len(self._open) > OPEN_INSTANCES:
                # not closed here: a call on another thread may hold it; its connection
                # closes when the last holder lets it go
                self._open.popitem(last=False)
            return db

    def resume(self, instance: str) -> None:
        """Resume an instance: its ``tmp`` volume starts empty."""
        self._clear_tmp(instance, self.db(instance))

    def _clear_tmp(self, instance: str, db: Any) -> None:
        """Empty the ``tmp`` volume and give its bytes (as :meth:`handle` counted them) back."""
        with db.write() as c:
            (freed,) = c.execute("SELECT coalesce(sum(size + length(CAST(path AS BLOB))), 0) FROM files "
                                 "WHERE volume='tmp'").fetchone()
            c.execute("DELETE FROM files WHERE volume='tmp'")
        if freed and self.quota is not None:
            self.quota.give_back(f"vfs:{instance}", freed)

    def handle(self, call: BrokerCall) -> Any:
        db = self.db(call.ctx.instance)
        if call.op == "query":
            return self._query(call, db.path)
        volume = call.arg("volume", str, "workspace")
        if volume not in VOLUMES:
            raise InvalidArgs(f"vfs: unknown volume {volume!r}; known: {', '.join(VOLUMES)}")
        if call.op == "list":
            prefix = call.arg("prefix", str, "")
            budget = ByteBudget.for_call(call, None, "vfs.list")
            entries = []
            with db.read() as c:
                cur = c.execute("SELECT path, size, mtime FROM files WHERE volume=? AND substr(path,1,?)=? "
                                "ORDER BY path LIMIT ?",
                                (volume, len(prefix), prefix, MAX_ROWS))
                while (row := cur.fetchone()) is not None:
                    budget.take(ByteBudget.size_of(row[0]) + 16)
                    entries.append({"path": row[0], "size": row[1], "mtime": row[2]})
            return {"entries": entries}
        path = normalize(call.arg("path", str))
        if call.op == "read":
            budget = ByteBudget.for_call(call, None, f"vfs.read {volume}:{path}")
            # one statement, like kv.get: the length first, and a blob over the budget is never
            # loaded — a second one would load whatever another process wrote meanwhile
            with db.read() as c:
                row = c.execute("SELECT length(data), CASE WHEN length(data) <= ? THEN data END FROM files "
                                "WHERE volume=? AND path=?", (budget.left, volume, path)).fetchone()
            if row is None:
                raise NotFound(f"vfs.read: no file {volume}:{path}")
            budget.take(row[0])
            return {"data": row[1]}
        if call.op == "stat":
            with db.read() as c:
                row = c.execute("SELECT size, mtime FROM files WHERE volume=? AND path=?",
                                (volume, path)).fetchone()
            if row is None:
                raise NotFound(f"vfs.stat: no file {volume}:{path}")
            return {"size": row[0], "mtime": row[1]}
        if call.op == "write":
            data = value_bytes(call, "data", self.max_file, "file")
            tenant, scope, taken = call.ctx.principal.tenant, f"vfs:{call.ctx.instance}", 0
            try:
                with db.write() as c:
                    exists = c.execute("SELECT size FROM files WHERE volume=? AND path=?",
                                       (volume, path)).fetchone()
                    if not exists:
                        (n,) = c.execute("SELECT count(*) FROM files").fetchone()
                        if n >= self.max_files:
                            raise refuse(CapabilityDenied, "quota",
                                         f"vfs.write: the instance holds {n} files (cap {self.max_files}); "
                                         "nothing was written")
                    delta = len(data) - (exists[0] if exists else -len(path.encode()))
                    if self.quota is not None:  # the tenant's disk quota: refused inside this write
                        self.quota.take(tenant, scope, delta, "vfs.write")
                        taken = delta
                    c.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)",
                              (volume, path, data, len(data), time.time()))
            except BaseException:
                if taken > 0 and self.quota is not None:
                    self.quota.take(tenant, scope, -taken, "vfs.write")
                raise
            return {"bytes": len(data)}
        if call.op == "delete":
            with db.write() as c:
                row = c.execute("SELECT size FROM files WHERE volume=? AND path=?", (volume, path)).fetchone()
                n = c.execute("DELETE FROM files WHERE volume=? AND path=?", (volume, path)).rowcount
            if row and self.quota is not None:
                self.quota.take(call.ctx.principal.tenant, f"vfs:{call.ctx.instance}",
                                -(row[0] + len(path.encode())), "vfs.delete")
            return {"deleted": bool(n)}
        raise InvalidArgs(f"vfs: unknown operation {call.op!r}")

    def _query(self, call: BrokerCall, path: Path) -> Any:
        """Run one read-only SELECT, bounded while SQLite works: the call's deadline (a
        progress handler), one value ≤ ``cap // QUERY_COLUMNS`` and ≤ what is left of the
        budget (``SQLITE_LIMIT_LENGTH``, also bounding every string, blob and sort record
        SQLite builds on the way), ≤ ``QUERY_COLUMNS`` columns, and rows taken one at a
        time from a :class:`ByteBudget` — refused before the next row is read."""
        sql = call.arg("sql", str)
        params = call.arg("params", list, [])
        if len(sql) > MAX_SQL:
            raise refuse(InvalidArgs, "too-large", f"vfs.query: SQL text over {MAX_SQL} bytes")
        budget = ByteBudget.for_call(call, self.max_query, "vfs.query")
        per_value = max(1, budget.cap // QUERY_COLUMNS)
        deadline = time.monotonic() + min(call.ctx.remaining(QUERY_SECONDS), QUERY_SECONDS)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=QUERY_SECONDS)
        try:
            conn.set_authorizer(_authorize)
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, PROGRESS_STEPS)
            conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, QUERY_COLUMNS)
            # the module checks the SQL text against the length limit too: it is ≤ 64 KiB
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(per_value, len(sql.encode()) + 1))
            rows: list[list[Any]] = []
            truncated = False
            try:
                cur = conn.execute(sql, params)
                cols = [d[0] for d in cur.description or ()]
                while (row := cur.fetchone()) is not None:
                    if len(rows) == MAX_ROWS:
                        truncated = True
                        break
                    for v in row:
                        budget.take(ByteBudget.size_of(v))
                    rows.append(list(row))
                    # the next row SQLite builds may not hold a value bigger than what is left
                    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(1, min(per_value, budget.left)))
            except sqlite3.DatabaseError as exc:
                raise _query_error(exc, per_value, budget) from None
        finally:
            conn.close()
        return {"columns": cols, "rows": rows, "truncated": truncated}


def _authorize(action: int, a: str | None, b: str | None, dbname: str | None, trigger: str | None) -> int:
    """vfs.query reads ``files`` (and its own CTEs) and nothing else."""
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_READ and (a == "files" or dbname is None):  # None: a CTE, not a table
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _query_error(exc: sqlite3.DatabaseError, per_value: int, budget: ByteBudget) -> WbError:
    text = str(exc)
    if "interrupted" in text:
        return refuse(Timeout, "deadline", "vfs.query: the query ran past its deadline; stopped")
    if "too big" in text or "too large" in text:
        if budget.left < per_value:  # the limit had shrunk to what was left of the answer
            return refuse(InvalidArgs, "too-large",
                          f"vfs.query: the answer passed the {budget.cap}-byte cap after "
                          f"{budget.used} bytes; stopped — narrow the query (a LIMIT, fewer columns)")
        return refuse(InvalidArgs, "too-large",
                      f"vfs.query: a value passed the {per_value}-byte per-value cap; stopped — select less "
                      "(substr(), length(), a LIMIT) or read the file with vfs.read")
    if "too many columns" in text:
        return refuse(InvalidArgs, "too-large",
                      f"vfs.query: more than {QUERY_COLUMNS} columns in a result row")
    return InvalidArgs(f"vfs.query: {text} (only SELECT over the files table is allowed)")
