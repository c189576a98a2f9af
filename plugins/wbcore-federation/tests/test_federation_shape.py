from __future__ import annotations

import json

from wbcore_federation import plugin


def test_seed_000_single_source_form_is_one_entity(make_toolkit, make_runtime):
    make_toolkit("src", exec="federation", caps="net",
                 extra={"URL": "https://api.example/items", "ROWS_PATH": "data.items",
                        "ENV_KEYS": "API_TOKEN"})
    make_toolkit("custom", exec="federation")
    rt = make_runtime(plugins=[plugin])
    r = rt.verify("src")
    assert r.ok, [c.render() for c in r.checks]
    assert any("federation source https://api.example/items (none pagination, auth bearer-env); "
               "entities: src" in c.message
               for c in r.checks)
    custom = rt.verify("custom")
    assert custom.ok
    honest = [c for c in custom.checks if c.warning and "cannot run yet" in c.message]
    assert honest and "custom (non-REST) connectors have no runner" in honest[0].message


def test_env_keys_naming_two_variables_is_ambiguous(make_toolkit, make_runtime):
    make_toolkit("src", exec="federation", caps="net",
                 extra={"URL": "https://api.example/items", "ENV_KEYS": "A B"})
    r = make_runtime(plugins=[plugin]).verify("src")
    assert not r.ok and any("#+ENV_KEYS: names more than one variable" in c.message for c in r.checks)


def test_federation_without_net_fails_verify(make_toolkit, make_runtime):
    from conftest import tracker_manifest

    make_toolkit("tracker", tracker_manifest("https://api.example/v1", caps="vfs"))
    r = make_runtime(plugins=[plugin]).verify("tracker")
    assert not r.ok and any("needs #+CAPS: net" in c.message for c in r.checks)


def test_the_single_source_form_reads_and_syncs(api, make_toolkit, make_runtime, wbx, monkeypatch, tmp_path):
    from conftest import TOKEN

    monkeypatch.setenv("WB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
    monkeypatch.setenv("API_TOKEN", TOKEN)
    make_toolkit("issues-feed", exec="federation", caps="net",
                 extra={"URL": api.base + "/issues", "ROWS_PATH": "data.items", "ENV_KEYS": "API_TOKEN",
                        "PAGINATION": "link"})
    rt = make_runtime(plugins=[plugin])
    g = wbx("toolkit", "grant", "issues-feed", "--env", "API_TOKEN", runtime=rt)
    assert g.exit_code == 0 and "env API_TOKEN" in g.stdout, g.stderr
    r = wbx("fed", "query", "issues-feed", "issues_feed", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert [row["issues_feed.id"] for row in json.loads(r.stdout)["rows"]] == [1, 2, 3, 4, 5, 6, 7]
    r = wbx("fed", "sync", "issues-feed", "--entity", "issues_feed", "--out", str(tmp_path / "f.org"),
            runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert ":ID: issues-feed-issues_feed-7" in (tmp_path / "f.org").read_text()
