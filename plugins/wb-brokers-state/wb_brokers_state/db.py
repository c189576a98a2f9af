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


class Db:
    def __init__(self, path: Path, schema: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.lock = threading.Lock()
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
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self.conn

    def close(self) -> None:
        with self.lock:
            self.conn.close()
