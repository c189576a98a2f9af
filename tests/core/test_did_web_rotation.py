"""did:web key rotation (issue 22's untried case): a signature that rests on a did:web
document is judged against the document as it is now. A long-lived runtime (the engine, an
MCP server) remembers a verdict per folder until a file changes; for a did:web signer it asks
the document again after ``trust.DID_WEB_TTL_S``, so a rotated or withdrawn key stops a
toolkit signed with the old key, and the rotation back lets it run again."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from wbcore_runtime.trust import did, identity, signing, verdict as trust
from wbcore_testing.loopback import serve_folder
from wbcore_testing.toolkit_sources import SEED0, SEED1, write_vec


def test_a_rotated_did_web_key_is_seen_by_a_long_lived_runtime(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    with serve_folder(site) as host:
        doc = site / ".well-known" / "did.json"
        old, new = identity.Identity.from_seed(SEED0), identity.Identity.from_seed(SEED1)
        did.write_document(old, host, doc)
        tk = write_vec(tmp_path / "tk")
        signing.sign(tk, old, author_did=did.did_for_host(host))
        monkeypatch.setattr(trust, "DID_WEB_TTL_S", 0.3)
        # the runtime's parts signature_verdict reads: its env and its per-runtime memo
        runtime = SimpleNamespace(env={did.ENV_HTTP_LOOPBACK: "1"})
        toolkit = SimpleNamespace(dir=tk)
        first = trust.signature_verdict(toolkit, runtime)
        assert first.ok and first.signer == did.did_for_host(host), first.message
        did.write_document(new, host, doc)  # the owner rotates the key (the old one leaked, say)
        assert trust.signature_verdict(toolkit, runtime).ok  # remembered, within the TTL
        time.sleep(0.4)
        rotated = trust.signature_verdict(toolkit, runtime)
        assert rotated.code == signing.WRONG_KEY, rotated.message
        assert trust.refusal(rotated) is not None
        did.write_document(old, host, doc)  # rotated back: the next look after the TTL passes again
        time.sleep(0.4)
        assert trust.signature_verdict(toolkit, runtime).ok


def test_a_did_key_verdict_is_remembered_until_the_folder_changes(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tk = write_vec(tmp_path / "tk")
    signing.sign(tk, identity.Identity.from_seed(SEED0))
    monkeypatch.setattr(trust, "DID_WEB_TTL_S", 0.0)
    runtime, toolkit = SimpleNamespace(env={}), SimpleNamespace(dir=tk)
    assert trust.signature_verdict(toolkit, runtime).ok
    calls = []
    monkeypatch.setattr(signing, "verify", lambda *a, **kw: calls.append(a) or signing.Verdict("x", "x"))
    assert trust.signature_verdict(toolkit, runtime).ok and not calls  # no document behind a did:key
