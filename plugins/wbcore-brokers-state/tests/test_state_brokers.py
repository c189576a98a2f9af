"""kv, queue and vfs through the Dock: limits refused with their own errors, nothing lost."""

from __future__ import annotations

import pytest

from wbcore_audit_trail import reader
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound

MiB = 1 << 20


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["brokers-state"])


def ctx(rt, tenant="acme", caps=("kv", "queue", "vfs"), **kw):
    return rt.dock.context(principal=Principal(tenant, "notes"), caps=caps, **kw)


def test_kv_roundtrip_and_tenant_isolation(rt):
    a, b = ctx(rt, "acme"), ctx(rt, "other")
    d = rt.dock
    assert d.call(a, "kv", "put", {"key": "k", "value": b"v1"}) == {"ok": True, "created": True}
    assert d.call(a, "kv", "get", {"key": "k"}) == {"value": b"v1"}
    with pytest.raises(NotFound):
        d.call(b, "kv", "get", {"key": "k"})
    d.call(a, "kv", "put", {"key": "k2", "value": "text"})
    assert d.call(a, "kv", "list", {"prefix": "k"}) == {"keys": ["k", "k2"]}
    assert d.call(a, "kv", "delete", {"key": "k"}) == {"deleted": True}
    assert d.call(a, "kv", "count") == {"count": 1, "cap": 10_000}


def test_kv_value_over_1mib_is_refused_and_old_value_kept(rt):
    c, d = ctx(rt), rt.dock
    d.call(c, "kv", "put", {"key": "big", "value": b"a" * MiB})
    with pytest.raises(InvalidArgs, match="exceeds the 1048576-byte cap") as exc:
        d.call(c, "kv", "put", {"key": "big", "value": b"b" * (MiB + 1)})
    assert exc.value.reason == "too-large"
    assert d.call(c, "kv", "get", {"key": "big"})["value"] == b"a" * MiB


def test_kv_list_pages_at_most_max_list_keys_whatever_the_limit(rt, monkeypatch):
    from wbcore_brokers_state import kv

    monkeypatch.setattr(kv, "MAX_LIST", 2)  # the same code path as 1000, without writing 1001 keys
    c, d = ctx(rt), rt.dock
    for i in range(3):
        d.call(c, "kv", "put", {"key": f"k{i}", "value": b"x"})
    assert d.call(c, "kv", "list", {"limit": 5}) == {"keys": ["k0", "k1"]}
    with pytest.raises(InvalidArgs, match=r"'limit' must be 0\.\.2, got -1"):  # SQLite's LIMIT -1: no limit
        d.call(c, "kv", "list", {"limit": -1})


def test_kv_key_quota(rt):
    from wbcore_brokers_state.kv import KvBroker

    drv = rt.dock.driver("kv")
    assert isinstance(drv, KvBroker)
    drv.max_keys = 3  # the same code path as 10k, without writing 10k rows
    c, d = ctx(rt), rt.dock
    for i in range(3):
        d.call(c, "kv", "put", {"key": f"k{i}", "value": b"x"})
    with pytest.raises(CapabilityDenied, match="cap 3") as exc:
        d.call(c, "kv", "put", {"key": "k3", "value": b"x"})
    assert exc.value.reason == "quota"
    d.call(c, "kv", "put", {"key": "k0", "value": b"overwrite is fine"})
    assert d.call(c, "kv", "count")["count"] == 3


def test_queue_fifo_and_the_1001st_message(rt):
    c, d = ctx(rt), rt.dock
    for i in range(1000):
        d.call(c, "queue", "push", {"queue": "q", "message": b"m%d" % i})
    with pytest.raises(CapabilityDenied, match="is full") as exc:
        d.call(c, "queue", "push", {"queue": "q", "message": b"one too many"})
    assert exc.value.reason == "queue-full"
    assert d.call(c, "queue", "depth", {"queue": "q"})["depth"] == 1000
    assert d.call(c, "queue", "pop", {"queue": "q"})["message"] == b"m0"
    assert d.call(c, "queue", "peek", {"queue": "q"})["message"] == b"m1"
    assert d.call(ctx(rt, "other"), "queue", "pop", {"queue": "q"})["message"] is None


def test_queue_message_over_256k(rt):
    c, d = ctx(rt), rt.dock
    with pytest.raises(InvalidArgs, match="message of 262145 bytes"):
        d.call(c, "queue", "push", {"message": b"x" * (256 * 1024 + 1)})
    assert d.call(c, "queue", "depth")["depth"] == 0


def test_vfs_volumes_and_tmp_cleared_on_resume(rt, make_runtime, wb_home):
    c, d = ctx(rt, instance="inst-1"), rt.dock
    for vol in ("workspace", "memory", "tmp"):
        d.call(c, "vfs", "write", {"volume": vol, "path": "/notes/a.txt", "data": vol.encode()})
    assert d.call(c, "vfs", "read", {"path": "notes/a.txt"}) == {"data": b"workspace"}
    assert d.call(c, "vfs", "read", {"volume": "tmp", "path": "notes/a.txt"}) == {"data": b"tmp"}
    with pytest.raises(InvalidArgs, match="'..'"):
        d.call(c, "vfs", "read", {"path": "../x"})
    with pytest.raises(InvalidArgs, match="unknown volume"):
        d.call(c, "vfs", "read", {"volume": "etc", "path": "x"})
    q = d.call(c, "vfs", "query", {"sql": "SELECT volume, path FROM files ORDER BY volume"})
    assert q["rows"] == [["memory", "notes/a.txt"], ["tmp", "notes/a.txt"], ["workspace", "notes/a.txt"]]
    rt2 = make_runtime(plugins=["brokers-state"])  # a new process-like runtime: resume
    c2 = ctx(rt2, instance="inst-1")
    assert rt2.dock.call(c2, "vfs", "read",
                         {"volume": "memory", "path": "notes/a.txt"}) == {"data": b"memory"}
    with pytest.raises(NotFound):
        rt2.dock.call(c2, "vfs", "read", {"volume": "tmp", "path": "notes/a.txt"})


@pytest.mark.parametrize("sql", [
    "DELETE FROM files",
    "INSERT INTO files VALUES ('workspace','x',x'00',1,0)",
    "ATTACH DATABASE '/tmp/evil.db' AS evil",
    "PRAGMA writable_schema=1",
    "SELECT * FROM sqlite_master",
])
def test_vfs_query_is_read_only_over_files(rt, sql):
    c, d = ctx(rt, instance="inst-q"), rt.dock
    d.call(c, "vfs", "write", {"path": "keep", "data": b"safe"})
    with pytest.raises(InvalidArgs):
        d.call(c, "vfs", "query", {"sql": sql})
    assert d.call(c, "vfs", "read", {"path": "keep"}) == {"data": b"safe"}


def test_vfs_query_deadline(rt):
    c, d = ctx(rt, instance="inst-slow", timeout=0.3), rt.dock
    d.call(c, "vfs", "write", {"path": "x", "data": b"1"})
    slow = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT count(*) FROM r"
    from wbcore_runtime.contract.errors import Timeout

    with pytest.raises(Timeout):
        d.call(c, "vfs", "query", {"sql": slow})


def test_a_calls_own_vfs_database_goes_with_its_context_and_named_ones_stay(rt):
    import gc

    d = rt.dock
    root = rt.home / "vfs"
    for _ in range(100):  # 100 calls, each with its own instance (what a tier makes per guest)
        c = ctx(rt)
        assert c.instance.startswith("call-")
        d.call(c, "vfs", "write", {"path": "f", "data": b"x" * 100})
        del c
    gc.collect()
    assert not [p for p in root.iterdir() if p.name.startswith("call-")]
    named = ctx(rt, instance="agent-run-1")
    d.call(named, "vfs", "write", {"path": "f", "data": b"kept"})
    del named
    gc.collect()
    assert (root / "agent-run-1.db").exists()


def test_a_dead_processs_call_databases_are_swept_at_start(make_runtime, wb_home):
    root = wb_home / "vfs"
    root.mkdir(parents=True, exist_ok=True)
    for suffix in (".db", ".db-wal", ".db-shm"):
        (root / f"call-999999999-1-deadbeef{suffix}").write_bytes(b"")
    (root / "agent-kept.db").write_bytes(b"")
    rt = make_runtime(plugins=["brokers-state"])
    rt.dock.driver("vfs")
    assert sorted(p.name for p in root.iterdir()) == ["agent-kept.db"]


def test_a_full_disk_reaches_the_guest_as_disk_full_and_the_audit_keeps_the_line(rt):
    from wbcore_runtime.contract.errors import DiskFull

    c, d = ctx(rt, instance="full-disk"), rt.dock
    d.call(c, "vfs", "write", {"path": "a", "data": b"x"})
    db = d.driver("vfs").db("full-disk")
    (pages,) = db.conn.execute("PRAGMA page_count").fetchone()
    db.conn.execute(f"PRAGMA max_page_count={pages + 2}")  # SQLite's own SQLITE_FULL, as on a full disk
    with pytest.raises(DiskFull, match="no space left") as exc:
        d.call(c, "vfs", "write", {"path": "b", "data": b"y" * (1 << 20)})
    assert exc.value.reason == "disk-full" and exc.value.exit_code == 74 and exc.value.name == "disk-full"
    status, body = d.call_raw(c, "vfs",
                              __import__("cbor2").dumps({"op": "write", "path": "b",
                                                         "data": b"y" * (1 << 20)}))
    assert status == 5 and __import__("cbor2").loads(body)["reason"] == "disk-full"
    lines = [e for e in reader.entries(d.audit) if e["op"] == "write" and e["outcome"] == "denied"]
    assert lines and lines[-1]["reason"] == "disk-full"
    assert d.call(c, "vfs", "read", {"path": "a"})["data"] == b"x"  # what was there is intact


def test_audit_lines_a_full_disk_cost_are_kept_or_counted(rt, monkeypatch):
    import errno
    import os

    from wbcore_runtime.dispatch import audit as audit_mod
    from wbcore_runtime.contract.errors import DiskFull

    c, d = ctx(rt), rt.dock
    log = d.audit
    log.durable = True  # every decision written before the answer
    real_write = os.write
    full = {"on": True}

    def write(fd, data):
        if full["on"] and fd == log._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(audit_mod, "MAX_PENDING", 3)
    monkeypatch.setattr(audit_mod.os, "write", write)
    for i in range(5):
        with pytest.raises(DiskFull) as exc:
            d.call(c, "kv", "put", {"key": f"k{i}", "value": b"v"})
        assert exc.value.reason == "disk-full"
    full["on"] = False
    d.call(c, "kv", "put", {"key": "after", "value": b"v"})
    got = list(reader.entries(log))
    lost = [e for e in got if e["outcome"] == "lost"]
    assert (len(lost) == 1 and lost[0]["reason"] == "disk-full"
            and lost[0]["target"].startswith("2 lines from"))
    assert [e["op"] for e in got if e["cap"] == "kv"][-4:] == ["put"] * 4  # 3 kept + the one after
    assert reader.verify(log) == []


def test_two_runs_writing_flat_out_stop_at_the_tenant_quota(make_runtime):
    import threading

    rt = make_runtime(plugins=["brokers-state"], env={"WB_TENANT_QUOTA": "1M"})
    d = rt.dock
    errors: list = []
    chunk = b"z" * (48 << 10)

    def run(n: int) -> None:
        c = ctx(rt, instance=f"agent-run-{n}")
        i = 0
        try:
            while i < 10_000:
                op = i % 3
                if op == 0:
                    d.call(c, "vfs", "write", {"path": f"f{i}", "data": chunk})
                elif op == 1:
                    d.call(c, "kv", "put", {"key": f"r{n}-{i}", "value": chunk})
                else:
                    d.call(c, "queue", "push", {"queue": f"q{n}-{i}", "message": chunk[: 32 << 10]})
                i += 1
        except CapabilityDenied as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(errors) == 2 and all(e.reason == "quota" for e in errors)
    assert "disk quota of 1048576 bytes (WB_TENANT_QUOTA)" in errors[0].message
    quota = d.driver("kv").quota
    assert 1_000_000 < quota.used("acme") <= 1 << 20
    # another tenant is not affected; giving bytes back makes room again
    d.call(ctx(rt, "other"), "kv", "put", {"key": "k", "value": chunk})
    c = ctx(rt, instance="agent-run-1")
    with pytest.raises(CapabilityDenied, match="disk quota"):
        d.call(c, "vfs", "write", {"path": "more", "data": chunk})
    d.call(c, "vfs", "delete", {"path": "f0"})
    d.call(c, "vfs", "write", {"path": "more", "data": chunk})


def test_queue_messages_are_counted_per_tenant_not_per_name(rt):
    d = rt.dock
    q = d.driver("queue")
    q.max_tenant = 50
    c = ctx(rt)
    for i in range(50):
        d.call(c, "queue", "push", {"queue": f"name-{i}", "message": b"m"})
    with pytest.raises(CapabilityDenied, match="holds 50 messages across its queues") as exc:
        d.call(c, "queue", "push", {"queue": "a-new-name", "message": b"m"})
    assert exc.value.reason == "quota"
    d.call(ctx(rt, "other"), "queue", "push", {"queue": "x", "message": b"m"})


def test_a_busy_host_neither_wipes_nor_breaks_a_live_instance(rt):
    """More instances in use than the broker keeps open (one per concurrent guest call): an
    instance closed to make room is reopened, not resumed, so its tmp volume survives, and a
    call that already held it still finishes."""
    from wbcore_brokers_state.vfs import OPEN_INSTANCES

    d, vfs = rt.dock, rt.dock.driver("vfs")
    run = ctx(rt, instance="agent-live")
    d.call(run, "vfs", "write", {"volume": "tmp", "path": "scratch", "data": b"mid-run"})
    held = vfs.db("agent-live")  # what a call on another thread is about to write through
    others = [ctx(rt) for _ in range(OPEN_INSTANCES)]
    for c in others:
        d.call(c, "vfs", "write", {"path": "f", "data": b"x"})
    assert d.call(run, "vfs", "read", {"volume": "tmp", "path": "scratch"}) == {"data": b"mid-run"}
    with held.write() as c:
        c.execute("INSERT OR REPLACE INTO files VALUES ('tmp', 'late', x'01', 1, 0)")
    assert d.call(run, "vfs", "read", {"volume": "tmp", "path": "late"}) == {"data": b"\x01"}


def test_a_resume_gives_the_tmp_volumes_bytes_back_to_the_tenant_quota(make_runtime):
    rt = make_runtime(plugins=["brokers-state"], env={"WB_TENANT_QUOTA": "1M"})
    scratch = b"s" * (600 << 10)
    rt.dock.call(ctx(rt, instance="agent-run-r"), "vfs", "write",
                 {"volume": "tmp", "path": "scratch", "data": scratch})
    rt2 = make_runtime(plugins=["brokers-state"], env={"WB_TENANT_QUOTA": "1M"})  # a new process resumes
    c2 = ctx(rt2, instance="agent-run-r")
    with pytest.raises(NotFound):
        rt2.dock.call(c2, "vfs", "read", {"volume": "tmp", "path": "scratch"})
    assert rt2.dock.driver("vfs").quota.used("acme") == 0  # the tenant holds nothing now
    rt2.dock.call(c2, "vfs", "write", {"volume": "tmp", "path": "scratch", "data": scratch})
    rt2.dock.driver("vfs").resume("agent-run-r")
    rt2.dock.call(c2, "vfs", "write", {"path": "kept", "data": scratch})
