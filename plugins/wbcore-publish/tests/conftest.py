from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from wbcore_runtime.trust import identity

SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))

# The VFS broker's on-disk contract (docs/dock.md, "VFS on disk"), written as the broker writes it.
BROKER_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
  volume TEXT NOT NULL, path TEXT NOT NULL, data BLOB NOT NULL, size INTEGER NOT NULL, mtime REAL NOT NULL,
  PRIMARY KEY (volume, path)
) WITHOUT ROWID;
"""


def write_vfs(home: Path, instance: str, rows: list[tuple[str, str, bytes, float]]) -> Path:
    path = home / "vfs" / f"{instance}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(BROKER_SCHEMA)
    for vol, p, data, mtime in rows:
        conn.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)", (vol, p, data, len(data), mtime))
    conn.close()
    return path


def vfs_rows(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT volume, path, data, size, mtime FROM files ORDER BY volume, path").fetchall()
    finally:
        conn.close()


@pytest.fixture
def key_a() -> identity.Identity:
    return identity.Identity.from_seed(SEED_A)


@pytest.fixture
def key_b() -> identity.Identity:
    return identity.Identity.from_seed(SEED_B)


@pytest.fixture
def workspace(tmp_path: Path, wb_home: Path) -> Path:
    ws = tmp_path / "src" / "notes"
    ws.mkdir(parents=True)
    (ws / "workspace.org").write_text("#+WORKSPACE: notes\n#+TITLE: Field notes\n#+HTML: notes.html\n"
                                      "#+VFS_INSTANCE: notes-1\n\nFree text about the workspace.\n")
    (ws / "notes.html").write_text(
        "<!doctype html><html><head><title>n</title></head><body>hi</body></html>\n")
    for name in ("workspace.org", "notes.html"):
        os.utime(ws / name, (1_600_000_000, 1_600_000_000))
    write_vfs(wb_home, "notes-1", [
        ("workspace", "README.md", b"# notes\n", 1_700_000_000.25),
        ("workspace", "data/rows.csv", b"a,b\n1,2\n", 1_700_000_100.5),
        ("memory", "facts.json", b'{"k": 1}', 1_700_000_200.0),
        ("tmp", "scratch.bin", bytes(range(256)), 1_700_000_050.0),
    ])
    return ws
