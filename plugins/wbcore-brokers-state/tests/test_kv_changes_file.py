"""The kv broker's read cache and its change counter: a replaced or truncated ``kv.db.changes``
is re-read, never served stale (issue 22, item 3; the counter itself: tests/core/test_generation_file.py).

The reader runs in a subprocess: a SIGBUS from a truncated mapping would show as a failed exit
there instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_kv_reader_serves_no_stale_value_after_counter_replaced(tmp_path: Path) -> None:
    """The kv broker's read cache: a replaced ``kv.db.changes`` must not keep an old value."""
    script = textwrap.dedent("""
        import os, sys, struct
        from pathlib import Path
        from wbcore_brokers_state.db import Db
        from wbcore_runtime.store.generation import Generation
        p = Path(sys.argv[1]) / "kv.db"
        db = Db(p, "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT);", changes=True)
        other = Db(p, "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT);", changes=True)
        with db.write() as c: c.execute("INSERT INTO t VALUES ('a', 'one')")
        seen = db.changes.value()
        ch = p.with_name("kv.db.changes")
        tmp = p.with_name("x.tmp"); tmp.write_bytes(ch.read_bytes()); os.replace(tmp, ch)
        with other.write() as c: c.execute("UPDATE t SET v='two'")
        assert db.changes.value() != seen, "a cache stamped before the replacement would be served"
        os.truncate(ch, 0)
        db.changes.value()
        with other.write() as c: c.execute("UPDATE t SET v='three'")
        assert db.changes.value() != seen
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
