"""The audit trail's reader (wbcore-audit-trail) over what the core's writer writes: the chain
verified and tampering caught, rotation and pruning, batched writes read back, several processes,
crashes mid-write, tail, pages and the cursor; and the reader served through the runtime."""

from __future__ import annotations

import json
from pathlib import Path

from wbcore_audit_trail import reader
from wbcore_runtime.contract import audit_trail
from wbcore_runtime.dispatch import audit
from wbcore_runtime.dispatch.audit import AuditLog
from wbcore_testing.samples import fill_audit


def test_chain_verifies_and_detects_an_edited_line(wb_home):
    log = AuditLog.for_home(wb_home)
    fill_audit(log, 5)
    assert reader.verify(log) == []
    lines = log.path.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["outcome"] = "denied"
    lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    log.path.write_text("\n".join(lines) + "\n")
    problems = [str(p) for p in reader.verify(log)]
    assert any(":3:" in p and "edited" in p for p in problems), problems


def test_deleted_middle_and_tail_lines_are_detected(wb_home):
    log = AuditLog.for_home(wb_home)
    fill_audit(log, 5)
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    assert any("deleted" in str(p) for p in reader.verify(log))
    log.path.write_text("\n".join(lines[:4]) + "\n")
    problems = [str(p) for p in reader.verify(log)]
    assert problems and "tail" in problems[-1]


def test_chain_continues_across_instances_and_rotation(wb_home):
    a = AuditLog(wb_home / "audit", max_bytes=600)
    b = AuditLog(wb_home / "audit", max_bytes=600)
    for i in range(6):
        writer = a if i % 2 else b  # two writers (as two processes would be), batches interleaved
        writer.record(principal="p", cap="kv", op="put", args_digest="d", outcome="allowed")
        writer.flush()
    assert len(a.segments()) > 1
    assert [e["seq"] for e in reader.entries(a)] == list(range(1, 7))
    assert reader.verify(a) == []


def test_pruned_segments_leave_a_verifiable_anchored_chain(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=400, keep=2)
    for _ in range(30):
        log.record(principal="p", cap="kv", op="put", args_digest="d", outcome="allowed")
    log.flush()
    assert len(list((wb_home / "audit").glob("audit-*.jsonl"))) == 2
    assert (wb_home / "audit" / "audit.anchor").exists()
    assert reader.verify(log) == []
    first = sorted((wb_home / "audit").glob("audit-*.jsonl"))[0]
    first.unlink()  # deleting a retained segment is not pruning: it is caught
    assert any("deleted" in str(p) for p in reader.verify(log))


# --- batched writing, several processes, crashes -------------------------------------------

_WRITER = """
import sys, time
from pathlib import Path
from wbcore_runtime.dispatch.audit import AuditLog
log = AuditLog.for_home(Path(sys.argv[1]), {})
n = int(sys.argv[2])
print("ready", flush=True)
for i in range(n if n > 0 else 10**9):
    log.record(principal=sys.argv[3], cap="kv", op="get", args_digest=f"sha256:{i}", outcome="allowed", nbytes=i)
"""  # noqa: E501


def _writer(home, n: int, principal: str = "p/w"):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(home), str(n), principal],
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def test_appends_are_batched_and_durable_logs_write_before_returning(wb_home):
    import time

    lazy = AuditLog(wb_home / "a", window=60)
    lazy.record(principal="p", cap="kv", op="get", args_digest="d", outcome="allowed")
    assert not lazy.path.exists() or lazy.path.read_bytes() == b""  # queued, not yet written
    assert [e["seq"] for e in reader.entries(lazy)] == [1]  # a read writes the queue first

    soon = AuditLog(wb_home / "b")  # the default window: written by the writer thread within ~5 ms
    soon.record(principal="p", cap="kv", op="get", args_digest="d", outcome="allowed")
    for _ in range(200):
        if soon.path.exists() and soon.path.read_bytes().endswith(b"\n"):
            break
        time.sleep(0.005)
    assert json.loads(soon.path.read_bytes())["seq"] == 1

    durable = AuditLog.for_home(wb_home, {"WB_AUDIT_DURABLE": "1"})
    durable.record(principal="p", cap="kv", op="get", args_digest="d", outcome="allowed")
    assert json.loads(durable.path.read_bytes().splitlines()[-1])["principal"] == "p"
    assert AuditLog.for_home(wb_home, {"WB_AUDIT_DURABLE": "1"}) is durable  # one writer per process


def test_two_processes_appending_make_one_chain(wb_home):
    procs = [_writer(wb_home, 3000, f"p/w{i}") for i in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    log = AuditLog.for_home(wb_home)
    entries = list(reader.entries(log))
    assert [e["seq"] for e in entries] == list(range(1, 6001))
    assert {e["principal"] for e in entries} == {"p/w0", "p/w1"}
    assert reader.verify(log) == []


def test_sigkill_mid_write_never_leaves_a_chain_that_verifies_wrongly(wb_home):
    import signal
    import time

    log = AuditLog(wb_home / "audit")
    for round_ in range(3):
        proc = _writer(wb_home, 0)
        time.sleep(0.03 + 0.02 * round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert reader.verify(log) == [], round_  # a torn last line is not part of the chain
        seqs = [e["seq"] for e in reader.entries(log)]
        assert seqs == list(range(1, len(seqs) + 1))
        log.record(principal="after", cap="kv", op="get", args_digest="d", outcome="allowed")
        log.flush()  # cuts off a torn line, then chains on from the last complete one
        assert reader.verify(log) == []
        assert list(reader.entries(log))[-1]["seq"] == len(seqs) + 1


def test_a_torn_line_is_ignored_then_cut_and_a_torn_committed_line_is_caught(wb_home):
    log = AuditLog(wb_home / "audit")
    fill_audit(log, 3)
    whole = log.path.read_bytes()
    with log.path.open("ab") as fh:
        fh.write(b'{"args":"sha256:x","bytes":1,"cap":"kv","ki')  # a writer died mid-write
    assert reader.verify(log) == [] and len(list(reader.entries(log))) == 3
    other = AuditLog(wb_home / "audit")  # another writer: must not chain after the fragment
    other.record(principal="t/b", cap="kv", op="put", args_digest="d", outcome="allowed")
    other.flush()
    assert log.path.read_bytes().startswith(whole) and reader.verify(log) == []
    assert [e["seq"] for e in reader.entries(log)] == [1, 2, 3, 4]

    data = log.path.read_bytes()
    log.path.write_bytes(data[:-40])  # the last *acknowledged* line cut short: the head says so
    problems = [str(p) for p in reader.verify(log)]
    assert problems and "tail" in problems[-1]


def test_a_head_behind_the_log_is_accepted_only_on_the_chain(wb_home):
    log = AuditLog(wb_home / "audit")
    fill_audit(log, 4)
    second = json.loads(log.path.read_bytes().splitlines()[1])
    log.head_path.write_text(f"2 {second['hash']}\n")  # killed between the log write and the head write
    assert reader.verify(log) == []
    log.head_path.write_text(f"2 {'0' * 64}\n")
    assert any("head records seq 2" in str(p) for p in reader.verify(log))


def test_tail_reads_backwards_across_segments_and_skips_a_torn_line(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=4000, keep=100)
    fill_audit(log, 300)
    assert len(log.segments()) > 5
    assert [e["seq"] for e in reader.tail(log, 3)] == [298, 299, 300]
    assert [e["seq"] for e in reader.tail(log, 100, after=290)] == list(range(291, 301))
    assert [e["seq"] for e in reader.tail(log, 1000)] == list(range(1, 301))
    with log.path.open("ab") as fh:
        fh.write(b'{"seq": 301, "torn')  # a writer killed mid-append
    assert [e["seq"] for e in reader.tail(log, 2)] == [299, 300]


def test_page_reads_newest_first_before_a_seq_filtered_and_within_its_scan(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=4000, keep=100)
    for i in range(300):
        log.record(principal=f"t/tk{i % 3}", cap="kv", op="get", args_digest="",
                   outcome="denied" if i % 10 == 0 else "allowed")
    log.flush()
    rows, older = reader.page(log, 50)
    assert [e["seq"] for e in rows] == list(range(300, 250, -1)) and older == 251
    rows, older = reader.page(log, 50, before=older)  # across rotated segments
    assert [e["seq"] for e in rows] == list(range(250, 200, -1)) and older == 201
    rows, older = reader.page(log, 500, before=11)
    assert [e["seq"] for e in rows] == list(range(10, 0, -1)) and older is None  # the trail's start
    denied = lambda e: e["outcome"] == "denied"  # noqa: E731
    rows, _ = reader.page(log, 5, match=denied)
    assert [e["seq"] for e in rows] == [291, 281, 271, 261, 251]
    # at most `scan` lines are looked at: a filter that matches nothing stops there, and says where
    rows, older = reader.page(log, 5, match=lambda e: False, scan=40)
    assert rows == [] and older == 261
    # the byte sieve skips lines unparsed and agrees with the parsed filter
    rows, _ = reader.page(log, 5, match=denied, contains=(b"denied", b"t/tk0"))
    assert ([e["seq"] for e in rows] == [271, 241, 211, 181, 151]
            and all(e["principal"] == "t/tk0" for e in rows))


def test_a_cursor_follows_the_trail_through_rotation_reading_only_what_is_new(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=4000, keep=100)
    fill_audit(log, 120)
    cur = reader.AuditCursor(log, 50)
    seen = []
    while batch := cur.read(7):
        seen += [e["seq"] for e in batch]
    assert seen == list(range(51, 121)) and not cur.pending()
    fill_audit(log, 200)  # rotates several times under the cursor
    assert cur.pending()
    seen = []
    while batch := cur.read(1000, max_bytes=2000):
        seen += [e["seq"] for e in batch]
    assert seen == list(range(121, 321))
    assert [e["seq"] for e in reader.AuditCursor(log, -1).read(2)] == [1, 2]


def test_a_cursor_on_an_empty_or_caught_up_trail_needs_no_read(wb_home):
    log = AuditLog(wb_home / "audit")
    cur = reader.AuditCursor(log, -1)
    assert not cur.pending() and cur.read(10) == []  # no trail yet
    fill_audit(log, 3)
    assert cur.pending() and [e["seq"] for e in cur.read(10)] == [1, 2, 3]
    late = reader.AuditCursor(log, 3)
    assert late.pending() and late.read(10) == [] and not late.pending()  # caught up: one stat per poll
    fill_audit(log, 1)
    assert late.pending() and [e["seq"] for e in late.read(10)] == [4]



# --- the service ----------------------------------------------------------------------------------


def test_the_runtime_serves_the_reader_and_it_reads_what_the_dock_wrote(make_runtime):
    rt = make_runtime()
    trail = audit_trail.service(rt)
    assert rt.audit_trails.names() == ["audit-trail"]
    fill_audit(rt.dock.audit, 3)
    assert [e["seq"] for e in trail.entries(rt.dock.audit)] == [1, 2, 3]
    assert [e["seq"] for e in trail.tail(rt.dock.audit, 2)] == [2, 3]
    assert trail.cursor(rt.dock.audit, 1).read(10)[0]["seq"] == 2
    assert trail.verify(rt.dock.audit) == []


def test_the_reader_checks_the_chain_with_the_writers_own_rules():
    # one home for each: the hash, the signed head's message and a segment's name are the writer's
    assert reader.chain_hash is audit.chain_hash and reader.signed_message is audit.signed_message
    assert reader.segment_seq is audit.segment_seq
    source = Path(reader.__file__).read_text()
    assert "hashlib" not in source and "sha256" not in source and '"audit-' not in source
