"""The audit trail: hash chain, tamper detection, redaction, and ``wbx audit``."""

from __future__ import annotations

import json

from wbcore.audit import AuditLog, redact_target


def _fill(log: AuditLog, n: int) -> None:
    for i in range(n):
        log.record(principal="t/a", cap="kv", op="get", args_digest=f"sha256:{i}", outcome="allowed", nbytes=i)
    log.flush()


def test_chain_verifies_and_detects_an_edited_line(wb_home):
    log = AuditLog.for_home(wb_home)
    _fill(log, 5)
    assert log.verify() == []
    lines = log.path.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["outcome"] = "denied"
    lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    log.path.write_text("\n".join(lines) + "\n")
    problems = [str(p) for p in log.verify()]
    assert any(":3:" in p and "edited" in p for p in problems), problems


def test_deleted_middle_and_tail_lines_are_detected(wb_home):
    log = AuditLog.for_home(wb_home)
    _fill(log, 5)
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    assert any("deleted" in str(p) for p in log.verify())
    log.path.write_text("\n".join(lines[:4]) + "\n")
    problems = [str(p) for p in log.verify()]
    assert problems and "tail" in problems[-1]


def test_chain_continues_across_instances_and_rotation(wb_home):
    a = AuditLog(wb_home / "audit", max_bytes=600)
    b = AuditLog(wb_home / "audit", max_bytes=600)
    for i in range(6):
        writer = a if i % 2 else b  # two writers (as two processes would be), batches interleaved
        writer.record(principal="p", cap="kv", op="put", args_digest="d", outcome="allowed")
        writer.flush()
    assert len(a.segments()) > 1
    assert [e["seq"] for e in a.entries()] == list(range(1, 7))
    assert a.verify() == []


def test_targets_are_redacted():
    assert redact_target("https://user:pw@example.com:8443/p?token=s3cret#x") == "https://example.com:8443/p"


def test_wbx_audit_shows_and_verifies(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    _fill(log, 3)
    shown = wbx("audit")
    assert shown.exit_code == 0 and "kv.get allowed" in shown.stdout
    ok = wbx("audit", "--verify")
    assert ok.exit_code == 0 and "3 entries" in ok.stdout
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[1:]) + "\n")
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70 and "audit chain broken" in bad.stderr


def test_pruned_segments_leave_a_verifiable_anchored_chain(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=400, keep=2)
    for _ in range(30):
        log.record(principal="p", cap="kv", op="put", args_digest="d", outcome="allowed")
    log.flush()
    assert len(list((wb_home / "audit").glob("audit-*.jsonl"))) == 2
    assert (wb_home / "audit" / "audit.anchor").exists()
    assert log.verify() == []
    first = sorted((wb_home / "audit").glob("audit-*.jsonl"))[0]
    first.unlink()  # deleting a retained segment is not pruning: it is caught
    assert any("deleted" in str(p) for p in log.verify())


def test_wbx_audit_filters(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    log.record(principal="a/x", cap="kv", op="get", args_digest="d", outcome="allowed")
    log.record(principal="b/y", cap="net", op="fetch", args_digest="d", outcome="denied", kind="capability-denied",
               reason="ssrf", target="http://10.0.0.1/?k=secret")
    out = wbx("audit", "--denied").stdout
    assert "b/y net.fetch denied capability-denied: ssrf http://10.0.0.1/" in out and "a/x" not in out
    assert "secret" not in out
    assert "a/x kv.get" in wbx("audit", "--principal", "a/x").stdout
    assert wbx("audit", "--cap", "queue").stdout.startswith("no audit entries") and "match" in wbx("audit", "--cap", "queue").stdout
