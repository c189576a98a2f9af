"""The audit trail's writer (``dispatch.audit``): what it writes and how; its reader is a service
(``contract.audit_trail``, served by wbcore-audit-trail, whose tests read and verify what this
writes). With no reader served, asking for one says what to install."""

from __future__ import annotations

import json

import pytest

from wbcore_runtime.contract import audit_trail
from wbcore_runtime.contract.errors import NotFound
from wbcore_runtime.dispatch.audit import AuditLog, redact_target, segment_seq


def test_targets_are_redacted():
    assert redact_target("https://user:pw@example.com:8443/p?token=s3cret#x") == "https://example.com:8443/p"


def test_a_url_behind_a_label_is_redacted_too(wb_home):
    # the llm broker's target is "<provider>:<base_url>": a deployer's base_url with a key in its
    # user-info or query must not reach the trail (it kept "openai:https://u:sk-s3cret@proxy/v1")
    assert redact_target("openai:https://u:sk-s3cret@proxy.example:8443/v1?key=k3y#f") == \
        "openai:https://proxy.example:8443/v1"
    assert redact_target("lane:python") == "lane:python"
    log = AuditLog(wb_home / "audit")
    log.record(principal="p", cap="llm", op="complete", args_digest="d", outcome="allowed",
               target="openai:https://u:sk-s3cret@proxy.example/v1")
    log.flush()
    text = b"".join(f.read_bytes() for f in (wb_home / "audit").rglob("*") if f.is_file())
    assert b"sk-s3cret" not in text and b"openai:https://proxy.example/v1" in text


def test_the_writer_encodes_exactly_the_canonical_json():
    from wbcore_runtime.dispatch.audit import _encode
    from wbcore_runtime.contract.canonical import canonical_json

    for entry in [
        (1763780000.123456, "t/a", "kv", "get", "sha256:ab", "allowed", None, None, None, 42, 0.08),
        (0.5, 'qu"o\\te\n', "net", "fetch", "d", "denied", "capability-denied", "ssrf", "https://h/é\u2028",
         0, 1e-05),
    ]:
        line, h = _encode(7, "f" * 64, entry)
        parsed = json.loads(line)
        assert parsed.pop("hash") == h and line.endswith(b"\n")
        assert line.startswith(canonical_json(parsed)[:-1])



def test_a_rotated_segment_is_named_after_its_last_seq(wb_home):
    log = AuditLog(wb_home / "audit", max_bytes=600)
    for _ in range(6):
        log.record(principal="p", cap="kv", op="put", args_digest="d", outcome="allowed")
        log.flush()
    rotated = log.segments()[:-1]
    assert rotated and segment_seq(log.path) is None
    for seg in rotated:
        assert segment_seq(seg) == json.loads(seg.read_bytes().splitlines()[-1])["seq"]


def test_with_no_reader_served_asking_for_one_says_what_to_install(make_runtime):
    with pytest.raises(NotFound, match="no audit-trail reader is installed; pip install wbcore-audit-trail"):
        audit_trail.service(make_runtime(plugins=[]))
