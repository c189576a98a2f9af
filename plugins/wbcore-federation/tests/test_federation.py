"""Federation end to end: a REST source on loopback (3 pages), query with joins, sync into Org."""

from __future__ import annotations

import json

import pytest
from conftest import HMAC_KEY, TOKEN, tracker_manifest

from wbcore_testing.fixtures import write_toolkit


@pytest.fixture
def allow_loopback(monkeypatch):
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    monkeypatch.delenv("WB_ALLOW_PRIVATE_SOURCES", raising=False)


@pytest.fixture
def tracker(api, toolkit_root, make_runtime, monkeypatch, allow_loopback):
    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    rt = make_runtime(plugins=["federation"])
    grant_env(rt, "tracker", "TRACKER_TOKEN")
    return rt


def granted(rt):
    """``rt`` with the tracker's token granted, as a deployer who consented would have it."""
    grant_env(rt, "tracker", "TRACKER_TOKEN")
    return rt


def grant_env(rt, tid: str, name: str) -> None:
    """The deployer's consent to read ``name`` for ``tid`` (``wbx toolkit grant tid --env name``)."""
    from wbcore_runtime.trust.consent import ConsentStore

    ConsentStore(rt.home).grant(tid, [], None, env=[name])


def _audit_text(rt) -> str:
    rt.dock.audit.flush()
    return "".join(p.read_text() for p in sorted((rt.home / "audit").glob("*.jsonl")))


def test_query_returns_the_joined_rows_of_two_entities(api, tracker, wbx):
    r = wbx("fed", "query", "tracker", "issues", "--join", "users:owner_id=id", "--json", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    rows = out["rows"]
    assert [row["issues.id"] for row in rows] == [1, 2, 3, 4, 5, 6, 7]  # all 3 pages of issues
    by_id = {u["id"]: u for u in api.users}
    for row in rows:
        assert row["users.id"] == row["issues.owner_id"]
        assert row["users.name"] == by_id[row["issues.owner_id"]]["name"]  # users came from 3 cursor pages
    assert rows[0]["issues.labels"] == '["bug"]'
    issue_pages = [p for p in api.seen if p.startswith("/api/issues")]
    user_pages = [p for p in api.seen if p.startswith("/api/users")]
    assert issue_pages == ["/api/issues", "/api/issues?page=2", "/api/issues?page=3"]
    assert user_pages == ["/api/users", "/api/users?cursor=c2", "/api/users?cursor=c3"]


def test_query_pushes_filters_down_and_applies_them_again(api, tracker, wbx):
    r = wbx("fed", "query", "tracker", "issues", "--where", "state=closed", "--csv", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "issues.id,issues.title,issues.state,issues.owner_id,issues.labels"
    assert [ln.split(",")[0] for ln in lines[1:]] == ["3", "6"]
    assert api.seen[0] == "/api/issues?state=closed"
    r = wbx("fed", "query", "tracker", "issues", "--join", "users:nope=id", runtime=tracker)
    assert r.exit_code == 2 and "issues has no field 'nope'" in r.stderr
    r = wbx("fed", "query", "tracker", "issues", "--join", "users; DROP TABLE x", runtime=tracker)
    assert r.exit_code == 2 and "write it as <entity>:<base field>=<entity field>" in r.stderr


def test_sync_twice_is_byte_identical_and_a_changed_row_updates_in_place(api, tracker, wbx, tmp_path):
    out = tmp_path / "tracker.org"
    r = wbx("fed", "sync", "tracker", "--out", str(out), "--json", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    first = out.read_bytes()
    assert json.loads(r.stdout)["added"] == 7
    text = first.decode()
    assert text.count(":task:") == 7 and ":ID: tracker-issues-3" in text
    mtime = out.stat().st_mtime_ns
    r = wbx("fed", "sync", "tracker", "--out", str(out), "--json", runtime=tracker)
    assert r.exit_code == 0 and json.loads(r.stdout)["written"] is False
    assert out.read_bytes() == first and out.stat().st_mtime_ns == mtime
    # a person's notes under a node survive; then the source changes one row
    lines = text.splitlines()
    end = next(i for i, ln in enumerate(lines)
               if ln.strip() == ":END:" and i > lines.index("  :ID: tracker-issues-4"))
    lines.insert(end + 1, "My notes on issue four.")
    out.write_text("\n".join(lines) + "\n")
    edited = out.read_bytes()
    api.issues[3]["title"] = "Issue four, retitled"
    api.issues[3]["state"] = "closed"
    r = wbx("fed", "sync", "tracker", "--out", str(out), "--json", runtime=tracker)
    counts = json.loads(r.stdout)
    assert counts["updated"] == 1 and counts["added"] == 0 and counts["unchanged"] == 6
    new = out.read_bytes().decode()
    old_lines, new_lines = edited.decode().splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert changed == [("* Issue number 4 :task:", "* Issue four, retitled :task:"),
                       ("  :TITLE: Issue number 4", "  :TITLE: Issue four, retitled"),
                       ("  :STATE: open", "  :STATE: closed")]
    assert "My notes on issue four." in new
    # a deleted row is marked, not removed; a new one is appended
    api.issues.pop(0)
    api.issues.append({"id": 8, "title": "Eighth", "state": "open", "owner_id": 101, "labels": []})
    counts = json.loads(wbx("fed", "sync", "tracker", "--out", str(out), "--json", runtime=tracker).stdout)
    assert (counts["added"], counts["deleted"]) == (1, 1)
    text = out.read_text()
    assert "* Issue number 1 :task:deleted:" in text and ":FED_DELETED: t" in text
    assert text.rstrip().splitlines()[-1] == "  :END:" and "* Eighth :task:" in text
    again = out.read_bytes()
    wbx("fed", "sync", "tracker", "--out", str(out), runtime=tracker)
    assert out.read_bytes() == again  # marking is idempotent too


def test_sync_defaults_to_the_declared_file_in_the_working_folder(api, tracker, wbx, tmp_path):
    r = wbx("fed", "sync", "tracker", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "tracker.org").is_file() and "synced" in r.stdout


def test_values_from_the_source_cannot_forge_org_structure(api, tracker, wbx, tmp_path):
    api.issues[0]["title"] = "evil\n* Forged heading :task:\n  :PROPERTIES:\n  :ID: tracker-issues-99"
    api.issues[1]["title"] = "** looks like a heading"
    api.issues[2]["state"] = "x\n#+SETUPFILE: /etc/passwd"
    out = tmp_path / "t.org"
    assert wbx("fed", "sync", "tracker", "--out", str(out), runtime=tracker).exit_code == 0
    text = out.read_text()
    lines = text.splitlines()
    assert len([ln for ln in lines if ln.startswith("*")]) == 7
    assert not [ln for ln in lines if ln.strip().startswith(":ID: tracker-issues-99")]
    assert not [ln for ln in lines if ln.strip() == ":PROPERTIES:" and not ln.startswith("  :")]
    assert not [ln for ln in text.splitlines() if ln.startswith("#+SETUPFILE")]
    assert [ln for ln in text.splitlines() if ln.startswith("*")][1].startswith("* \u200b** looks like")


def test_a_source_on_a_private_address_is_refused_unless_allowed(api, toolkit_root, make_runtime, wbx,
                                                                 monkeypatch):
    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    monkeypatch.delenv("WB_ALLOW_PRIVATE_HOSTS", raising=False)
    monkeypatch.delenv("WB_ALLOW_PRIVATE_SOURCES", raising=False)
    rt = granted(make_runtime(plugins=["federation"]))
    r = wbx("fed", "query", "tracker", "issues", runtime=rt)
    assert r.exit_code == 126 and "SSRF guard" in r.stderr and "loopback" in r.stderr, r.stderr
    # the setting that applies
    assert "WB_ALLOW_PRIVATE_HOSTS" in r.stderr and "WB_NET_ALLOW_PRIVATE_HOSTS" not in r.stderr
    assert api.seen == []  # not one request reached the server
    audit = [json.loads(ln) for ln in _audit_text(rt).splitlines()]
    denied = [e for e in audit if e["op"] == "fed.get"]
    assert denied and denied[0]["outcome"] == "denied" and denied[0]["reason"] == "ssrf"
    assert denied[0]["principal"] == "default/tracker"
    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    rt = granted(make_runtime(plugins=["federation"]))
    assert wbx("fed", "query", "tracker", "issues", runtime=rt).exit_code == 0


def test_a_next_link_off_the_origin_is_not_followed(api, toolkit_root, make_runtime, wbx, monkeypatch,
                                                    allow_loopback):
    manifest = tracker_manifest(api.base).replace(":PATH: /users", ":PATH: /away")
    manifest = manifest.replace(":PAGINATION: cursor next_cursor cursor", ":PAGINATION: link")
    write_toolkit(toolkit_root, "tracker", manifest)
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    r = wbx("fed", "query", "tracker", "users", runtime=granted(make_runtime(plugins=["federation"])))
    assert r.exit_code == 126 and "off the source's origin" in r.stderr, r.stderr


def test_a_page_over_its_byte_budget_is_stopped(api, toolkit_root, make_runtime, wbx, monkeypatch,
                                                allow_loopback):
    write_toolkit(toolkit_root, "tracker",
                  tracker_manifest(api.base).replace(":PATH: /users", ":PATH: /huge"))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    r = wbx("fed", "query", "tracker", "users", runtime=granted(make_runtime(plugins=["federation"])))
    assert r.exit_code == 2 and "byte cap" in r.stderr, r.stderr


def test_the_token_never_appears_in_output_or_audit(api, tracker, wbx, monkeypatch, tmp_path, make_runtime,
                                                    caplog):
    import logging

    caplog.set_level(logging.DEBUG)  # every logger, httpx's and httpcore's included
    results = [wbx("fed", "query", "tracker", "issues", "--join", "users:owner_id=id", runtime=tracker),
               wbx("fed", "sync", "tracker", "--out", str(tmp_path / "x.org"), runtime=tracker)]
    assert all(r.exit_code == 0 for r in results)
    assert api.headers[0]["Authorization"] == f"Bearer {TOKEN}"  # it was sent to the source ...
    monkeypatch.setenv("TRACKER_TOKEN", "WRONG-tok-31337")  # ... and a refusal does not echo it either
    results.append(wbx("fed", "query", "tracker", "issues",
                       runtime=granted(make_runtime(plugins=["federation"]))))
    assert results[-1].exit_code != 0 and "401" in results[-1].stderr
    audit = _audit_text(tracker)
    assert "fed.get" in audit
    assert "HTTP Request" in caplog.text or caplog.records  # the logs were captured ...
    for blob in ([audit, caplog.text, (tmp_path / "x.org").read_text()]
                 + [r.stdout + r.stderr for r in results]):
        assert TOKEN not in blob and "WRONG-tok-31337" not in blob  # ... and hold no token


def test_hmac_auth_signs_through_the_secrets_broker(api, toolkit_root, make_runtime, wbx, allow_loopback,
                                                    tmp_path,
                                                   capfd, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    pytest.importorskip("wbcore_brokers_secrets",
                        reason="the secrets broker is a separate plugin (wbcore-brokers-secrets)")
    from wbcore_brokers_secrets.store import SecretStore

    api.auth = "hmac"
    write_toolkit(toolkit_root, "tracker",
                  tracker_manifest(api.base, auth="hmac-sha256 tracker-key", caps="net secrets"))
    rt = make_runtime(plugins=["federation", "brokers-secrets"])
    SecretStore(rt.home / "brokers" / "secrets.db").put("default", "tracker-key", HMAC_KEY)
    r = wbx("fed", "query", "tracker", "issues", "--join", "users:owner_id=id", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["rows"]) == 7
    s = wbx("fed", "sync", "tracker", "--out", str(tmp_path / "h.org"), runtime=rt)
    assert s.exit_code == 0, s.stderr
    audit = _audit_text(rt)
    entries = [json.loads(ln) for ln in audit.splitlines()]
    signs = [e for e in entries if e["cap"] == "secrets" and e["op"] == "sign"]
    assert len(signs) == 9 and all(e["outcome"] == "allowed" and e["principal"] == "default/tracker"
                                   for e in signs)
    assert len([e for e in entries if e["op"] == "fed.get" and e["outcome"] == "allowed"]) == 9
    captured = capfd.readouterr()
    key_forms = [HMAC_KEY.decode(), HMAC_KEY.hex()]
    for blob in [audit, r.stdout, r.stderr, s.stdout, s.stderr, captured.out, captured.err, caplog.text,
                 (tmp_path / "h.org").read_text()]:
        assert not any(k in blob for k in key_forms)
    # without the secrets cap granted, nothing is signed and nothing is sent
    write_toolkit(toolkit_root, "tracker",
                  tracker_manifest(api.base, auth="hmac-sha256 tracker-key", caps="net"))
    api.seen.clear()
    r = wbx("fed", "query", "tracker", "issues",
            runtime=make_runtime(plugins=["federation", "brokers-secrets"]))
    assert r.exit_code == 126 and "'secrets' is not granted" in r.stderr, r.stderr
    assert api.seen == []


def test_verify_checks_the_declaration(api, toolkit_root, make_runtime):
    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base))
    write_toolkit(toolkit_root, "bad",
                  tracker_manifest(api.base).replace("#+TOOLKIT: tracker", "#+TOOLKIT: bad")
                  .replace(":ID: tracker", ":ID: bad").replace(":PATH: /issues", ":PATH: /../x"))
    rt = granted(make_runtime(plugins=["federation"]))
    ok = rt.verify("tracker")
    assert ok.ok, [c.render() for c in ok.checks]
    assert any("entities: issues, users; syncs issues → tracker.org" in c.message for c in ok.checks)
    bad = rt.verify("bad")
    assert not bad.ok and any(":PATH:" in c.message and "manifest.org:" in c.message for c in bad.checks)


def test_a_connector_from_another_plugin_serves_read_and_sync(toolkit_root, make_runtime, wbx, tmp_path):
    """Connectors are a registry kind (``wbcore_federation_sources``): #+SOURCE picks one."""
    import types

    from wbcore_federation import plugin

    from wbcore_runtime import hookimpl
    from wbcore_runtime.contract.records import FederationSource

    data = {"notes": [{"id": "b", "text": "second", "tag": 1}, {"id": "a", "text": "first", "tag": 2}],
            "tags": [{"id": 1, "label": "one"}, {"id": 2, "label": "two"}]}

    class Memo:
        def connect(self, runtime, source, *, caps, tenant):
            assert source.kind == "memo" and source.keywords["MEMO_BOOK"] == "demo"
            return self

        def rows(self, entity, params=None):
            return [dict(r) for r in data[entity.name]]

    mod = types.ModuleType("memo_connector")

    @hookimpl
    def wbcore_federation_sources():
        yield FederationSource(name="memo", summary="rows from memory (a test connector)",
                               factory=lambda rt: Memo())

    mod.wbcore_federation_sources = wbcore_federation_sources
    manifest = tracker_manifest("").replace("#+URL: \n", "#+SOURCE: memo\n#+MEMO_BOOK: demo\n")
    manifest = (manifest.replace(":ENTITY: issues", ":ENTITY: notes")
                .replace(":ENTITY: users", ":ENTITY: tags"))
    manifest = manifest.replace(":FIELDS: id title state owner_id labels", ":FIELDS: id text tag")
    manifest = (manifest.replace(":TITLE: title", ":TITLE: text")
                .replace("#+SYNC: issues tracker.org", "#+SYNC: notes n.org"))
    write_toolkit(toolkit_root, "tracker", manifest)
    rt = make_runtime(plugins=[plugin, mod])
    report = rt.verify("tracker")
    assert report.ok, [c.render() for c in report.checks]
    assert any("through the memo connector; entities: notes, tags" in c.message for c in report.checks)
    r = wbx("fed", "query", "tracker", "notes", "--join", "tags:tag=id", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert [(x["notes.id"], x["tags.label"]) for x in json.loads(r.stdout)["rows"]] == [("a", "two"),
                                                                                        ("b", "one")]
    assert wbx("fed", "sync", "tracker", "--out", str(tmp_path / "n.org"), runtime=rt).exit_code == 0
    assert ":ID: tracker-notes-a" in (tmp_path / "n.org").read_text()
    without = make_runtime(plugins=[plugin])
    bad = without.verify("tracker")
    assert not bad.ok and any("#+SOURCE: memo is not an installed connector (installed: http-json)"
                              in c.message for c in bad.checks)


def test_a_crash_mid_sync_leaves_the_old_file(api, tracker, wbx, tmp_path, monkeypatch):
    import os

    out = tmp_path / "tracker.org"
    assert wbx("fed", "sync", "tracker", "--out", str(out), runtime=tracker).exit_code == 0
    before = out.read_bytes()
    api.issues[0]["title"] = "changed"
    real = os.replace

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    r = wbx("fed", "sync", "tracker", "--out", str(out), runtime=tracker)
    monkeypatch.setattr(os, "replace", real)
    assert r.exit_code != 0
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp left behind
    assert wbx("fed", "sync", "tracker", "--out", str(out), runtime=tracker).exit_code == 0
    assert "* changed :task:" in out.read_text()


def test_sync_refuses_a_symlinked_target(api, tracker, wbx, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "link.org").symlink_to(victim)
    r = wbx("fed", "sync", "tracker", "--out", str(tmp_path / "link.org"), runtime=tracker)
    assert r.exit_code == 2 and "symbolic link" in r.stderr
    assert victim.read_text() == "keep me\n"


def test_sql_text_reads_the_entities_it_names_and_nothing_else(api, tracker, wbx):
    q = ("SELECT i.id, i.title, u.name FROM issues AS i JOIN users AS u ON u.id = i.owner_id "
         "WHERE i.state = 'open' ORDER BY i.id")
    r = wbx("fed", "query", "tracker", q, "--json", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["columns"] == ["id", "title", "name"]
    assert [row["id"] for row in out["rows"]] == [1, 2, 4, 5, 7]
    assert all(row["name"].startswith("user-") for row in out["rows"])
    api.seen.clear()
    r = wbx("fed", "query", "tracker", "SELECT count(*) AS n FROM users", "--json", runtime=tracker)
    assert json.loads(r.stdout)["rows"] == [{"n": 4}]
    assert not [p for p in api.seen if p.startswith("/api/issues")]  # only what the query names is fetched
    for bad, why in [("DELETE FROM issues", "only a SELECT"),
                     ("SELECT * FROM issues; DROP TABLE users", "one statement"),
                     ("SELECT * FROM issues WHERE id IN (SELECT 1 FROM pragma_table_info('users'))",
                      "the query failed"),
                     ("WITH x AS (SELECT 1) SELECT * FROM x", "names no entity"),
                     ("SELECT load_extension('x') FROM issues", "the query failed")]:
        r = wbx("fed", "query", "tracker", bad, runtime=tracker)
        assert r.exit_code == 2 and why in r.stderr, (bad, r.stderr)


def test_pages_are_cached_for_the_ttl_then_revalidated_by_etag(api, toolkit_root, make_runtime, wbx,
                                                               monkeypatch, allow_loopback):
    from wbcore_federation import cache

    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base, extra="#+CACHE_TTL: 300"))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    rt = granted(make_runtime(plugins=["federation"]))
    first = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert first.exit_code == 0 and len(api.seen) == 3
    again = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert again.stdout == first.stdout and len(api.seen) == 3  # fresh: no request at all
    cached = [json.loads(ln) for ln in _audit_text(rt).splitlines() if '"fed.cache"' in ln]
    assert len(cached) == 3 and all(e["outcome"] == "allowed" for e in cached)
    files = list((rt.home / "federation" / "cache" / "default" / "tracker").glob("*.json"))
    assert len(files) == 3 and all(f.stat().st_mode & 0o077 == 0 for f in files)
    assert not any(TOKEN in f.read_text() for f in files)
    monkeypatch.setattr(cache.PageCache, "fresh", lambda self, entry: False)  # the TTL has passed
    api.statuses.clear()
    third = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert third.stdout == first.stdout and api.statuses == [304, 304, 304]
    assert all(h.get("If-None-Match", "").startswith('"') for h in api.headers[-3:])
    api.issues[6]["title"] = "Seventh, changed"
    api.statuses.clear()
    fourth = json.loads(wbx("fed", "query", "tracker", "issues", "--json", runtime=rt).stdout)
    assert api.statuses == [304, 304, 200] and fourth["rows"][-1]["issues.title"] == "Seventh, changed"


@pytest.mark.parametrize("stale", [False, True])
def test_pages_served_from_the_cache_count_toward_the_reads_byte_budget(
        api, toolkit_root, make_runtime, wbx, monkeypatch, allow_loopback, stale):
    # A read is at most TOTAL_BYTES in all, whether a page crossed the network, was served fresh
    # from the cache or was revalidated by a 304 (which carries no body): otherwise pages cached
    # by earlier reads add up past the budget without a byte being counted.
    from wbcore_federation import cache, source

    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base, extra="#+CACHE_TTL: 300"))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    rt = granted(make_runtime(plugins=["federation"]))
    first = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert first.exit_code == 0 and len(api.seen) == 3
    files = list((rt.home / "federation" / "cache" / "default" / "tracker").glob("*.json"))
    pages = [len(json.loads(f.read_text())["body"].encode()) for f in files]
    monkeypatch.setattr(source, "TOTAL_BYTES", sum(pages) - 1)  # the read's three pages do not fit
    if stale:
        monkeypatch.setattr(cache.PageCache, "fresh", lambda self, entry: False)
    again = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert again.exit_code == 2 and f"{source.TOTAL_BYTES}-byte budget" in again.stderr, again.stderr
    assert len(api.seen) == (6 if stale else 3)  # fresh: no request; stale: a 304 for each page


def test_the_rate_limit_paces_requests(api, toolkit_root, make_runtime, wbx, monkeypatch, allow_loopback):
    import time

    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base, extra="#+RATE_LIMIT: 2/0.4"))
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    rt = granted(make_runtime(plugins=["federation"]))
    t0 = time.monotonic()
    r = wbx("fed", "query", "tracker", "issues", "--join", "users:owner_id=id", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert len(api.seen) == 6 and time.monotonic() - t0 >= 0.8  # 6 requests at 2 per 0.4 s
    bad = tracker_manifest(api.base, extra="#+RATE_LIMIT: fast")
    write_toolkit(toolkit_root, "tracker", bad)
    assert not granted(make_runtime(plugins=["federation"])).verify("tracker").ok


def test_sync_every_interval(api, tracker, wbx, tmp_path, monkeypatch):
    import time

    from wbcore_federation import cli

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    r = wbx("fed", "sync", "tracker", "--out", str(tmp_path / "e.org"), "--every", "5m", "--times", "3",
            runtime=tracker)
    assert r.exit_code == 0, r.stderr
    assert (slept == [300.0, 300.0]
            and [ln.split()[0] for ln in r.stdout.splitlines()] == ["synced", "unchanged", "unchanged"])
    assert cli._interval("1h") == 3600 and cli._interval("45") == 45
    r = wbx("fed", "sync", "tracker", "--every", "0s", runtime=tracker)
    assert r.exit_code == 2 and "an interval of 1 s to 7 days" in r.stderr


def test_odd_rows_and_links_fail_cleanly(api, toolkit_root, make_runtime, wbx, monkeypatch, allow_loopback):
    manifest = tracker_manifest(api.base).replace(":FIELDS: id title state owner_id labels\n", "")
    write_toolkit(toolkit_root, "tracker", manifest)
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    api.issues[0]["ID"] = "shadow"  # differs from "id" only in case
    api.issues[1]["bad name; DROP"] = 1  # not a field name: not a column
    rt = granted(make_runtime(plugins=["federation"]))
    r = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["columns"] == ["issues.id", "issues.title", "issues.state", "issues.owner_id",
                                               "issues.labels"]


def test_query_streams_pages_and_caps_each_value(api, tracker, wbx):
    """Rows go into the tables a page at a time: a value over the per-value cap on page 1
    stops the read with the entity, row and field named, before page 2 is fetched."""
    from wbcore_federation import query

    api.issues[1]["title"] = "t" * (query.MAX_VALUE_BYTES + 1)
    r = wbx("fed", "query", "tracker", "issues", runtime=tracker)
    assert r.exit_code == 2
    assert f"issues row 2 field 'title': a value of {query.MAX_VALUE_BYTES + 1} bytes exceeds" in r.stderr
    assert [p for p in api.seen if p.startswith("/api/issues")] == ["/api/issues"]


def test_a_field_first_seen_on_a_later_page_becomes_a_column(api, tracker, wbx):
    api.users[3]["team"] = "infra"  # only on the users' third page
    r = wbx("fed", "query", "tracker", "users", "--json", runtime=tracker)
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [row["users.team"] for row in rows] == [None, None, None, "infra"]


def test_the_query_database_is_capped(api, tracker, wbx, monkeypatch):
    from wbcore_federation import query

    monkeypatch.setattr(query, "MAX_DB_BYTES", 64 << 10)
    for row in api.issues:
        row["title"] = "x" * 20_000
    r = wbx("fed", "query", "tracker", "issues", runtime=tracker)
    assert r.exit_code == 2 and "the query's tables exceed" in r.stderr


def test_bearer_env_needs_a_grant_naming_the_variable(api, toolkit_root, make_runtime, wbx, monkeypatch,
                                                      allow_loopback):
    """A manifest picks #+AUTH: bearer-env VAR and #+URL; without the deployer's grant naming VAR,
    nothing is sent, and the audit names the variable, never its value (issue 22 item 5)."""
    write_toolkit(toolkit_root, "tracker", tracker_manifest(api.base, auth="bearer-env WB_ENGINE_TOKEN"))
    monkeypatch.setenv("WB_ENGINE_TOKEN", TOKEN)
    rt = make_runtime(plugins=["federation"])
    shown = rt.verify("tracker")
    text = "\n".join(c.render() for c in shown.checks)
    assert "reads the deployer's environment: WB_ENGINE_TOKEN" in text
    assert "wbx toolkit grant tracker --env WB_ENGINE_TOKEN" in text
    r = wbx("fed", "query", "tracker", "issues", runtime=rt)
    assert r.exit_code == 126 and "wbx toolkit grant tracker --env WB_ENGINE_TOKEN" in r.stderr, r.stderr
    assert api.seen == [], "a request left without the grant"
    # a grant for another variable does not cover it, and a variable the manifest does not name is refused
    r = wbx("toolkit", "grant", "tracker", "--env", "HOME_KEY", runtime=rt)
    assert r.exit_code == 2 and "does not read HOME_KEY" in r.stderr, r.stderr
    audit = _audit_text(rt)
    assert "WB_ENGINE_TOKEN" in audit and '"env.read"' in audit and TOKEN not in audit
    r = wbx("toolkit", "grant", "tracker", "--env", "WB_ENGINE_TOKEN", runtime=rt)
    assert r.exit_code == 0, r.stderr
    r = wbx("fed", "query", "tracker", "issues", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert api.seen and TOKEN not in _audit_text(rt)
    r = wbx("toolkit", "revoke", "tracker", "--env", "WB_ENGINE_TOKEN", runtime=rt)
    assert r.exit_code == 0, r.stderr
    r = wbx("fed", "query", "tracker", "issues", runtime=rt)
    assert r.exit_code == 126, r.stderr
