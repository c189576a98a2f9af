from __future__ import annotations

from wb_federation import plugin


def test_federation_verify_reads_the_declaration(make_toolkit, make_runtime):
    make_toolkit("src", exec="federation", caps="net", extra={"URL": "https://api.example/items", "ROWS_PATH": "data.items"})
    make_toolkit("custom", exec="federation")
    rt = make_runtime(plugins=[plugin])
    r = rt.verify("src")
    assert not r.ok  # a URL with no :entity: heading declares nothing to read
    assert any("no heading tagged :entity:" in c.message and "manifest.org:1" in c.message for c in r.checks)
    custom = rt.verify("custom")
    assert custom.ok
    honest = [c for c in custom.checks if c.warning and "cannot run yet" in c.message]
    assert honest and "custom (non-REST) connectors have no runner" in honest[0].message


def test_federation_without_net_fails_verify(make_toolkit, make_runtime):
    from conftest import tracker_manifest

    make_toolkit("tracker", tracker_manifest("https://api.example/v1", caps="vfs"))
    r = make_runtime(plugins=[plugin]).verify("tracker")
    assert not r.ok and any("needs #+CAPS: net" in c.message for c in r.checks)
