from __future__ import annotations

from wb_federation import plugin


def test_federation_verify_is_structural(make_toolkit, make_runtime):
    make_toolkit("src", exec="federation", caps="net", extra={"URL": "https://api.example/items", "ROWS_PATH": "data.items"})
    make_toolkit("custom", exec="federation")
    rt = make_runtime(plugins=[plugin])
    r = rt.verify("src")
    assert r.ok
    assert "✓ exec: federation source https://api.example/items rows at data.items; structural check only" in [c.render() for c in r.checks]
    assert rt.verify("custom").ok
    honest = [c for c in r.checks if c.warning and "cannot run yet" in c.message]
    assert honest and "no runner" in honest[0].message
