"""State brokers are bounded while they work: a guest with only ``vfs`` (or ``kv``/``queue``)
cannot make the host hold more than the answer's cap plus a constant, nor run past the
call's deadline, and a refused answer loses nothing that was stored."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, Timeout
from wbcore_runtime.trust.policy import PROFILES

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0

MiB = 1 << 20
COMPUTE = PROFILES["compute"]
EIGHT = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r WHERE i<8) "

# Runs in a fresh interpreter so that nothing earlier in the test session (or in the
# set-up that wrote the database) has already raised the peak RSS it measures.
PROBE = textwrap.dedent("""
    import json, resource, sys, time
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.contract.errors import WbError
    from wbcore_runtime.trust.policy import PROFILES
    from wbcore_runtime.runtime import Runtime

    home, instance, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    rt = Runtime.open(plugins=["brokers-state"], home=home, roots=[], cwd=home)
    timeout = PROFILES["compute"].timeout_s
    def ctx():
        return rt.dock.context(principal=Principal("acme", "q"), caps=["vfs"], timeout=timeout, instance=instance)
    rt.dock.call(ctx(), "vfs", "query", {"sql": "SELECT count(*) FROM files"})  # warm: imports, first open
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = []
    for sql in queries:
        t0 = time.monotonic()
        try:
            got = rt.dock.call(ctx(), "vfs", "query", {"sql": sql})
            out.append({"ok": len(got["rows"]), "s": time.monotonic() - t0})
        except WbError as exc:
            out.append({"reason": getattr(exc, "reason", exc.kind.value), "s": time.monotonic() - t0})
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"results": out, "grew_kib": grew}))
""")  # noqa: E501


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["brokers-state"])


def ctx(rt, caps=("kv", "queue", "vfs"), tenant="acme", **kw):
    return rt.dock.context(principal=Principal(tenant, "notes"), caps=caps, **kw)


def stored_vfs(rt, instance: str, rows: list[tuple[str, int]]) -> Path:
    """An instance database holding ``rows`` of (path, size) zero-filled files, written
    straight into SQLite (a guest could reach such sizes by many writes; vfs.write caps one).
    No journal: the rows are written once, to the database file only."""
    from wbcore_brokers_state.vfs import SCHEMA

    path = rt.dock.driver("vfs").path_of(instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    c = sqlite3.connect(path, isolation_level=None)
    try:
        c.execute("PRAGMA journal_mode=OFF")
        c.execute("PRAGMA synchronous=OFF")
        c.executescript(SCHEMA)
        c.execute("BEGIN")
        for name, size in rows:
            c.execute("INSERT INTO files VALUES ('workspace', ?, zeroblob(?), ?, 0)", (name, size, size))
        c.execute("COMMIT")
    finally:
        c.close()
    return path


def probe(home: Path, instance: str, queries: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(home), instance, json.dumps(queries)],
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    print(instance, got)  # the figures, for -s
    return got


def test_query_of_generated_huge_values_is_refused_in_sqlite_not_after(rt, wb_home):
    stored_vfs(rt, "gen", [("a", 1)])
    got = probe(wb_home, "gen", [
        EIGHT + "SELECT zeroblob(200000000) FROM r",          # 8 x 200 MB rows
        "SELECT zeroblob(2000000000)",                        # one 2 GB value
        EIGHT + "SELECT randomblob(50000000) FROM r",
        EIGHT + "SELECT group_concat(printf('%.*c', 1000000, 'x')) FROM r, r AS s",
        "SELECT " + ", ".join(["zeroblob(1000000)"] * 17),  # wider than the column cap
    ])
    assert [r.get("reason") for r in got["results"]] == ["too-large"] * 5, got
    assert all(r["s"] < COMPUTE.timeout_s + 1 for r in got["results"]), got
    assert got["grew_kib"] < 100 * 1024, got


def test_query_over_many_rows_stops_at_the_budget_before_the_next_row(rt, wb_home):
    # 48 rows of 900 kB: each value fits, the answer (43 MB) does not
    stored_vfs(rt, "rows", [(f"f{i:02}", 900_000) for i in range(48)])
    cols16 = ", ".join(f"data c{i}" for i in range(16))
    got = probe(wb_home, "rows", [
        "SELECT path, size FROM files",  # small answers still pass
        "SELECT data FROM files",
        "SELECT data, data, data, data, data, data, data, data, data, data, data, data FROM files",
        # many values inside one row, in subqueries SQLite materialises, sorts or joins
        "SELECT 1 FROM " + ", ".join(f"(SELECT {cols16} FROM files LIMIT 1) t{i}" for i in range(8)),
        f"SELECT count(*) FROM (SELECT DISTINCT {cols16} FROM files)",
        f"SELECT max(c1) FROM (SELECT {cols16} FROM files ORDER BY random())",
    ])
    reasons = [r.get("reason") for r in got["results"]]
    assert reasons == [None] + ["too-large"] * 5, got
    assert got["results"][0]["ok"] == 48
    assert got["grew_kib"] < 100 * 1024, got


@pytest.mark.slow
def test_query_of_8_stored_200mb_rows_under_compute_profile(rt, wb_home):
    """The issue's attack: 1.6 GB of stored rows, a guest with only ``vfs``."""
    path = stored_vfs(rt, "big", [(f"big{i}", 200_000_000) for i in range(8)])
    assert path.stat().st_size > 1_600_000_000
    try:
        got = probe(wb_home, "big", ["SELECT data FROM files", "SELECT path, substr(data, 1, 10) FROM files",
                                     "SELECT path, length(data) FROM files"])
    finally:
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)
    reasons = [r.get("reason") for r in got["results"]]
    assert reasons == ["too-large", "too-large", None], got
    assert all(r["s"] < COMPUTE.timeout_s + 1 for r in got["results"]), got
    assert got["grew_kib"] < 100 * 1024, got


def test_slow_query_ends_at_the_deadline(rt):
    c = ctx(rt, caps=("vfs",), timeout=1.0)
    rt.dock.call(c, "vfs", "write", {"path": "x", "data": b"1"})
    count = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 10000000000) "
             "SELECT count(*) FROM r")
    t0 = time.monotonic()
    with pytest.raises(Timeout) as exc:
        rt.dock.call(c, "vfs", "query", {"sql": count})
    assert exc.value.reason == "deadline"
    assert time.monotonic() - t0 < 1.0 + SLACK_S


def test_query_budget_follows_a_smaller_max_response(rt):
    c = ctx(rt, caps=("vfs",), max_response=64 << 10)
    for i in range(20):
        rt.dock.call(c, "vfs", "write", {"path": f"f{i}", "data": b"x" * 4000})
    assert len(rt.dock.call(c, "vfs", "query", {"sql": "SELECT data FROM files LIMIT 10"})["rows"]) == 10
    with pytest.raises(InvalidArgs, match="65536-byte cap") as exc:
        rt.dock.call(c, "vfs", "query", {"sql": "SELECT data FROM files"})
    assert exc.value.reason == "too-large"
    assert rt.dock.call(c, "vfs", "read", {"path": "f19"}) == {"data": b"x" * 4000}


def test_vfs_read_and_list_are_checked_before_loading(rt):
    small = ctx(rt, caps=("vfs",), max_response=4096, instance="rl")
    rt.dock.call(small, "vfs", "write", {"path": "big", "data": b"y" * 8000})
    with pytest.raises(InvalidArgs, match="4096-byte cap") as exc:
        rt.dock.call(small, "vfs", "read", {"path": "big"})
    assert exc.value.reason == "too-large"
    for i in range(200):
        rt.dock.call(small, "vfs", "write", {"path": f"d/{i:03}-" + "n" * 40, "data": b""})
    with pytest.raises(InvalidArgs) as exc:
        rt.dock.call(small, "vfs", "list", {"prefix": "d/"})
    assert exc.value.reason == "too-large"
    wide = ctx(rt, caps=("vfs",), instance="rl")
    assert rt.dock.call(wide, "vfs", "read", {"path": "big"}) == {"data": b"y" * 8000}
    assert len(rt.dock.call(wide, "vfs", "list", {"prefix": "d/"})["entries"]) == 200


def test_vfs_read_loads_the_file_whose_size_it_checked(rt, monkeypatch):
    """Another process rewrites the file right after its size passed the check: the blob loaded
    is still the one checked (it was a second statement, which loaded the new 8 MiB one)."""
    from wbcore_runtime.dispatch.budget import ByteBudget

    small = ctx(rt, caps=("vfs",), max_response=4096, instance="race")
    rt.dock.call(small, "vfs", "write", {"path": "f", "data": b"small"})
    writer = sqlite3.connect(rt.dock.driver("vfs").path_of("race"), isolation_level=None)
    take = ByteBudget.take

    def checked_then_rewritten(self, n):
        take(self, n)
        if self.what == "vfs.read workspace:f":
            writer.execute("UPDATE files SET data=zeroblob(8 << 20), size=8 << 20 WHERE path='f'")

    monkeypatch.setattr(ByteBudget, "take", checked_then_rewritten)
    try:
        assert rt.dock.call(small, "vfs", "read", {"path": "f"}) == {"data": b"small"}
    finally:
        writer.close()
    with pytest.raises(InvalidArgs, match="4096-byte cap"):  # the next read sees the new file, unloaded
        rt.dock.call(small, "vfs", "read", {"path": "f"})


def test_kv_get_and_list_are_bounded_and_nothing_is_lost(rt):
    small = ctx(rt, max_response=8192)
    rt.dock.call(small, "kv", "put", {"key": "v", "value": b"z" * 100_000})
    with pytest.raises(InvalidArgs) as exc:
        rt.dock.call(small, "kv", "get", {"key": "v"})
    assert exc.value.reason == "too-large"
    for i in range(100):
        rt.dock.call(small, "kv", "put", {"key": f"k{i:03}" + "k" * 200, "value": b"1"})
    with pytest.raises(InvalidArgs) as exc:
        rt.dock.call(small, "kv", "list", {"prefix": "k"})
    assert exc.value.reason == "too-large"
    assert len(rt.dock.call(small, "kv", "list", {"prefix": "k", "limit": 20})["keys"]) == 20
    wide = ctx(rt)
    assert rt.dock.call(wide, "kv", "get", {"key": "v"}) == {"value": b"z" * 100_000}
    assert rt.dock.call(wide, "kv", "count")["count"] == 101


def test_queue_pop_that_cannot_be_answered_keeps_the_message(rt):
    small = ctx(rt, max_response=16 << 10)
    rt.dock.call(small, "queue", "push", {"queue": "q", "message": b"m" * (200 << 10)})
    for op in ("pop", "peek"):
        with pytest.raises(InvalidArgs) as exc:
            rt.dock.call(small, "queue", op, {"queue": "q"})
        assert exc.value.reason == "too-large"
    assert rt.dock.call(small, "queue", "depth", {"queue": "q"})["depth"] == 1
    assert rt.dock.call(ctx(rt), "queue", "pop", {"queue": "q"})["message"] == b"m" * (200 << 10)


def test_byte_budget_decides_once():
    from wbcore_runtime.dispatch.budget import ByteBudget

    b = ByteBudget(10, "thing")
    b.take(ByteBudget.size_of(b"12345"))
    b.take(ByteBudget.size_of("é"))  # UTF-8 bytes, not characters
    assert (b.used, b.left) == (7, 3)
    with pytest.raises(InvalidArgs, match="thing: the answer passed the 10-byte cap") as exc:
        b.take(ByteBudget.size_of(1.5) + ByteBudget.size_of(None))
    assert exc.value.reason == "too-large"
