"""One SQLite database file with the settings every state broker shares.

Why sync ``sqlite3`` and not aiosqlite: a Dock host import is a synchronous callback that
runs on the guest's own thread inside a wasmtime call. aiosqlite would run these same
``sqlite3`` calls on a helper thread and need an event loop bridged into every call —
more latency per call, no more concurrency. Atomicity comes from SQLite itself: WAL
journal, one ``BEGIN IMMEDIATE`` transaction per write, so a process killed mid-write
leaves the old or the new row, never a torn one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wbcore_runtime.store.generation import Generation


class Db:
    """``changes=True`` keeps a change counter beside the file (``<name>.changes``, a
    :class:`wbcore_runtime.store.generation.Generation`): every write transaction bumps it after its
    commit, so a read cache in any process stays valid while the counter (a stat and a pread)
    is unchanged. Every writer of such a file must go through :meth:`write`."""

    def __init__(self, path: Path, schema: str, *, changes: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.lock = threading.Lock()
        self.changes: Generation | None = None
        if changes:
            counter = Generation(path.parent, path.name + ".changes")
            try:
                counter.ensure()
                self.changes = counter if counter.mapped else None
            except OSError:
                self.changes = None  # a read-only folder: no counter, so no read cache
        self.conn = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # durable against a process kill in WAL mode
        self.conn.executescript(schema)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction (``BEGIN IMMEDIATE`` takes the write lock up front)."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                if self.conn.in_transaction:  # SQLite already rolled back on SQLITE_FULL: keep its error
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
            if self.changes is not None:
                self.changes.bump()  # after the commit: a reader that sees it sees the row

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self.conn

    def close(self) -> None:
        with self.lock:
            self.conn.close()
