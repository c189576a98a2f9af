"""``wbx audit``: showing, filtering and verifying the trail, and the forgeries ``--verify`` catches."""

from __future__ import annotations

import json

from wbcore_audit_trail import reader
from wbcore_runtime.dispatch.audit import AuditLog
from wbcore_testing.samples import fill_audit


def test_wbx_audit_shows_and_verifies(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    fill_audit(log, 3)
    shown = wbx("audit")
    assert shown.exit_code == 0 and "kv.get allowed" in shown.stdout
    ok = wbx("audit", "--verify")
    assert ok.exit_code == 0 and "3 entries" in ok.stdout
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[1:]) + "\n")
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70 and "audit chain broken" in bad.stderr


def test_wbx_audit_names_the_reader_to_install_when_none_is_served(wb_home, wbx, make_runtime):
    fill_audit(AuditLog.for_home(wb_home), 1)
    got = wbx("audit", runtime=make_runtime(plugins=[]))
    assert got.exit_code == 127 and "pip install wbcore-audit-trail" in got.stderr, got.stderr


def test_wbx_audit_filters(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    log.record(principal="a/x", cap="kv", op="get", args_digest="d", outcome="allowed")
    log.record(principal="b/y", cap="net", op="fetch", args_digest="d", outcome="denied",
               kind="capability-denied", reason="ssrf", target="http://10.0.0.1/?k=secret")
    out = wbx("audit", "--denied").stdout
    assert "b/y net.fetch denied capability-denied: ssrf http://10.0.0.1/" in out and "a/x" not in out
    assert "secret" not in out
    assert "a/x kv.get" in wbx("audit", "--principal", "a/x").stdout
    assert (wbx("audit", "--cap", "queue").stdout.startswith("no audit entries")
            and "match" in wbx("audit", "--cap", "queue").stdout)


# --- the signed head (issue 22 item 5) -----------------------------------------------------------------


def _recompute(lines: list[str], upto: int | None = None) -> tuple[list[str], int, str]:
    """What someone who can write the log but holds no key does: edit, then re-chain every line."""
    from wbcore_runtime.dispatch.audit import GENESIS, chain_hash

    out, prev, seq = [], GENESIS, 0
    for raw in lines[:upto]:
        entry = json.loads(raw)
        entry.pop("hash")
        entry["prev"] = prev
        entry["hash"] = prev = chain_hash(prev, entry)
        seq = entry["seq"]
        out.append(json.dumps(entry, sort_keys=True, separators=(",", ":")))
    return out, seq, prev


def test_a_recomputed_chain_fails_verify_with_its_reason(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    fill_audit(log, 5)
    assert wbx("audit", "--verify").exit_code == 0
    lines = log.path.read_text().splitlines()
    edited = json.loads(lines[2])
    edited["outcome"] = "denied"
    lines[2] = json.dumps(edited)
    chained, seq, head = _recompute(lines)
    log.path.write_text("\n".join(chained) + "\n")
    (wb_home / "audit" / "audit.head").write_text(f"{seq} {head}\n")  # the head matches the new chain
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70
    assert "no signature by the tenant key" in bad.stdout, bad.stdout
    # ... and keeping the old signature on the new hash is caught too
    old_sig = "ab" * 64
    (wb_home / "audit" / "audit.head").write_text(f"{seq} {head} {old_sig}\n")
    bad = wbx("audit", "--verify")
    assert (bad.exit_code == 70
            and "recomputed, or its tail cut, and the head rewritten" in bad.stdout), bad.stdout


def test_a_cut_tail_with_a_rewritten_head_fails_verify(wb_home, wbx):
    log = AuditLog.for_home(wb_home)
    fill_audit(log, 6)
    signed = (wb_home / "audit" / "audit.head").read_text().split()
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join(lines[:3]) + "\n")
    cut = json.loads(lines[2])
    # the cut log's last (seq, hash) under the signature of the real head
    (wb_home / "audit" / "audit.head").write_text(f"{cut['seq']} {cut['hash']} {signed[2]}\n")
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70 and "head's signature is not the tenant key's" in bad.stdout, bad.stdout
    (wb_home / "audit" / "audit.head").unlink()  # no head at all
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70 and "no signed head" in bad.stdout, bad.stdout


def test_a_forged_anchor_fails_verify(wb_home, wbx, monkeypatch):
    monkeypatch.setenv("WB_AUDIT_MAX_BYTES", "400")
    monkeypatch.setenv("WB_AUDIT_KEEP", "2")
    log = AuditLog.for_home(wb_home, {"WB_AUDIT_MAX_BYTES": "400", "WB_AUDIT_KEEP": "2"})
    fill_audit(log, 30)
    anchor = wb_home / "audit" / "audit.anchor"
    words = anchor.read_text().split()
    assert len(words) == 3, "the anchor is signed"
    assert reader.verify(log) == []
    # drop the oldest retained segment and move the anchor to where it ended (unsigned, or re-using the
    # old signature): both are refused, saying the anchor was forged
    first = sorted((wb_home / "audit").glob("audit-*.jsonl"))[0]
    last = json.loads(first.read_text().splitlines()[-1])
    first.unlink()
    anchor.write_text(f"{last['seq']} {last['hash']} {words[2]}\n")
    problems = [str(p) for p in reader.verify(log)]
    assert any("anchor was forged" in p for p in problems), problems
    bad = wbx("audit", "--verify")
    assert bad.exit_code == 70 and "anchor" in bad.stdout
