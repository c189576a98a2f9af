"""The ``vfs`` cap: a per-instance SQLite VFS with three volumes, plus ``vfs-query``.

One database file per instance (``$WB_HOME/vfs/<instance>.db``), one table keyed by
``(volume, path)``: ``workspace`` (the working tree, persists), ``memory`` (long-term,
persists across freeze/resume) and ``tmp`` (scratch, cleared on resume). Opening an
existing instance database is a *resume*: the first open in a process clears ``tmp``.
``query`` is the raw vfs-query import: one read-only SELECT over ``files`` (it sees the
volume column), on a read-only connection with an authorizer that allows reading
``files`` and nothing else, a row cap and the call's deadline.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from wbcore.dock import BrokerCall, refuse
from wbcore.errors import CapabilityDenied, InvalidArgs, NotFound, Timeout

from wb_brokers_state.kv import value_bytes

VOLUMES = ("workspace", "memory", "tmp")
MAX_FILE = 16 << 20
MAX_FILES = 10_000
MAX_ROWS = 1000
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
    def __init__(self, root: Path, *, max_file: int = MAX_FILE, max_files: int = MAX_FILES) -> None:
        self.root = root
        self.max_file, self.max_files = max_file, max_files
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def path_of(self, instance: str) -> Path:
        if not _INSTANCE.match(instance):
            raise InvalidArgs(f"vfs: instance id {instance!r} must match {_INSTANCE.pattern}")
        return self.root / f"{instance}.db"

    def db(self, instance: str) -> Any:
        from wb_brokers_state.db import Db

        with self._lock:
            db = self._open.get(instance)
            if db is not None:
                self._open.move_to_end(instance)
                return db
            path = self.path_of(instance)
            resumed = path.exists()
            db = Db(path, SCHEMA)
            if resumed:
                with db.write() as c:
                    c.execute("DELETE FROM files WHERE volume='tmp'")
            self._open[instance] = db
            while len(self._open) > OPEN_INSTANCES:
                self._open.popitem(last=False)[1].close()
            return db

    def resume(self, instance: str) -> None:
        """Resume an instance: its ``tmp`` volume starts empty."""
        with self.db(instance).write() as c:
            c.execute("DELETE FROM files WHERE volume='tmp'")

    def handle(self, call: BrokerCall) -> Any:
        db = self.db(call.ctx.instance)
        if call.op == "query":
            return self._query(call, db.path)
        volume = call.arg("volume", str, "workspace")
        if volume not in VOLUMES:
            raise InvalidArgs(f"vfs: unknown volume {volume!r}; known: {', '.join(VOLUMES)}")
        if call.op == "list":
            prefix = call.arg("prefix", str, "")
            with db.read() as c:
                rows = c.execute("SELECT path, size, mtime FROM files WHERE volume=? AND substr(path,1,?)=? ORDER BY path LIMIT ?",
                                 (volume, len(prefix), prefix, MAX_ROWS)).fetchall()
            return {"entries": [{"path": p, "size": s, "mtime": m} for p, s, m in rows]}
        path = normalize(call.arg("path", str))
        if call.op == "read":
            with db.read() as c:
                row = c.execute("SELECT data FROM files WHERE volume=? AND path=?", (volume, path)).fetchone()
            if row is None:
                raise NotFound(f"vfs.read: no file {volume}:{path}")
            return {"data": row[0]}
        if call.op == "stat":
            with db.read() as c:
                row = c.execute("SELECT size, mtime FROM files WHERE volume=? AND path=?", (volume, path)).fetchone()
            if row is None:
                raise NotFound(f"vfs.stat: no file {volume}:{path}")
            return {"size": row[0], "mtime": row[1]}
        if call.op == "write":
            data = value_bytes(call, "data", self.max_file, "file")
            with db.write() as c:
                exists = c.execute("SELECT 1 FROM files WHERE volume=? AND path=?", (volume, path)).fetchone()
                if not exists:
                    (n,) = c.execute("SELECT count(*) FROM files").fetchone()
                    if n >= self.max_files:
                        raise refuse(CapabilityDenied, "quota", f"vfs.write: the instance holds {n} files (cap {self.max_files}); nothing was written")
                c.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)", (volume, path, data, len(data), time.time()))
            return {"bytes": len(data)}
        if call.op == "delete":
            with db.write() as c:
                n = c.execute("DELETE FROM files WHERE volume=? AND path=?", (volume, path)).rowcount
            return {"deleted": bool(n)}
        raise InvalidArgs(f"vfs: unknown operation {call.op!r}")

    def _query(self, call: BrokerCall, path: Path) -> Any:
        sql = call.arg("sql", str)
        params = call.arg("params", list, [])
        if len(sql) > 64 << 10:
            raise refuse(InvalidArgs, "too-large", "vfs.query: SQL text over 64 KiB")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        deadline = time.monotonic() + min(call.ctx.remaining(5.0), 5.0)
        try:
            def authorize(action: int, a: str | None, b: str | None, dbname: str | None, trigger: str | None) -> int:
                if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)):
                    return sqlite3.SQLITE_OK
                if action == sqlite3.SQLITE_READ and (a == "files" or dbname is None):  # None: a CTE, not a table
                    return sqlite3.SQLITE_OK
                return sqlite3.SQLITE_DENY

            conn.set_authorizer(authorize)
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
            try:
                cur = conn.execute(sql, params)
                rows = cur.fetchmany(MAX_ROWS + 1)
            except sqlite3.DatabaseError as exc:
                if "interrupted" in str(exc):
                    raise refuse(Timeout, "deadline", "vfs.query: the query ran past its deadline") from None
                raise InvalidArgs(f"vfs.query: {exc} (only SELECT over the files table is allowed)") from None
            cols = [d[0] for d in cur.description or ()]
        finally:
            conn.close()
        truncated = len(rows) > MAX_ROWS
        return {"columns": cols, "rows": [list(r) for r in rows[:MAX_ROWS]], "truncated": truncated}
