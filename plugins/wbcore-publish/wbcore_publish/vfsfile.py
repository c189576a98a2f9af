"""The VFS broker's on-disk database, read and written as data (no import of its plugin).

The layout is a contract written in ``docs/dock.md`` ("VFS on disk"):
``$WB_HOME/vfs/<instance>.db``, SQLite, one table ``files`` keyed ``(volume, path)``.
A bundle carries the rows of the workspace's volumes as a *canonical database*: a fresh
file in rollback-journal mode, the contract's schema, rows inserted in ``(volume, path)``
byte order. The same rows give the same bytes under one SQLite version, which is what makes
ship → restore → ship byte-stable.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs

#: The contract's schema, verbatim (``docs/dock.md``). A bundled database holds exactly this.
SCHEMA = (
    "CREATE TABLE files (\n"
    "  volume TEXT NOT NULL, path TEXT NOT NULL, data BLOB NOT NULL, size INTEGER NOT NULL, mtime REAL NOT "
    "NULL,\n  PRIMARY KEY (volume, path)\n"
    ") WITHOUT ROWID"
)
MAX_ROWS = 100_000
MAX_BYTES = 256 << 20
SQLITE_MAGIC = b"SQLite format 3\x00"

Row = tuple[str, str, bytes, int, float]


def db_path(home: Path, instance: str) -> Path:
    return home / "vfs" / f"{instance}.db"


def read_rows(path: Path, volumes: tuple[str, ...], *, max_rows: int = MAX_ROWS,
              max_bytes: int = MAX_BYTES) -> list[Row]:
    """Every row of ``volumes``, in ``(volume, path)`` byte order, bounded while read."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
    try:
        marks = ",".join("?" * len(volumes))
        cur = conn.execute(
            f"SELECT volume, path, data, size, mtime FROM files WHERE volume IN ({marks})"
            " ORDER BY CAST(volume AS BLOB), CAST(path AS BLOB)", volumes)
        rows: list[Row] = []
        total = 0
        for volume, p, data, size, mtime in cur:
            data = bytes(data)
            total += len(data)
            if len(rows) >= max_rows or total > max_bytes:
                raise InvalidArgs(f"{path}: the VFS holds more than {max_rows} files or {max_bytes} bytes; "
                                  "a bundle is bounded (see docs/bundles.md)")
            rows.append((str(volume), str(p), data, int(size), float(mtime)))
        return rows
    except sqlite3.DatabaseError as exc:
        raise InvalidArgs(f"{path}: cannot read the VFS database ({exc})") from None
    finally:
        conn.close()


def canonical_db(rows: list[Row]) -> bytes:
    """The canonical database bytes of ``rows`` (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="wbundle-db-") as tmp:
        path = Path(tmp) / "vfs.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("PRAGMA page_size=4096")
            conn.execute("BEGIN")
            conn.execute(SCHEMA)
            ordered = sorted(rows, key=lambda r: (r[0].encode("utf-8"), r[1].encode("utf-8")))
            conn.executemany("INSERT INTO files VALUES (?,?,?,?,?)", ordered)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return path.read_bytes()


def check_db(path: Path) -> int:
    """Refuse a bundled database that is not exactly the contract's one table; return its rows."""
    with path.open("rb") as fh:
        if fh.read(16) != SQLITE_MAGIC:
            raise InvalidArgs(f"{path.name}: not an SQLite database")
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        objects = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        if objects != [("table", "files", SCHEMA)]:
            names = ", ".join(f"{t} {n}" for t, n, _ in objects) or "nothing"
            raise InvalidArgs(f"{path.name}: the VFS database must hold exactly the table `files` of the "
                              f"contract (docs/dock.md); it holds {names}")
        (check,) = conn.execute("PRAGMA quick_check").fetchone()
        if check != "ok":
            raise InvalidArgs(f"{path.name}: the VFS database is corrupt ({check})")
        bad = conn.execute("SELECT count(*) FROM files WHERE volume NOT IN ('workspace','memory','tmp')"
                           " OR size != length(data)").fetchone()[0]
        if bad:
            raise InvalidArgs(f"{path.name}: {bad} VFS rows have an unknown volume or a wrong size")
        return int(conn.execute("SELECT count(*) FROM files").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise InvalidArgs(f"{path.name}: not a readable VFS database ({exc})") from None
    finally:
        conn.close()


def exists(home: Path, instance: str) -> list[Path]:
    """The instance's database files already on disk (db, -wal, -shm)."""
    base = db_path(home, instance)
    return [p for p in (base, Path(f"{base}-wal"), Path(f"{base}-shm")) if os.path.lexists(p)]
