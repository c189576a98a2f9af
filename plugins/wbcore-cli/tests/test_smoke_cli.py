from __future__ import annotations


def test_list_show_verify_roundtrip(make_toolkit, wbx):
    make_toolkit("alpha", exec=None)
    r = wbx("toolkit", "list")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("alpha · stable · Use alpha for testing.")
    r = wbx("toolkit", "verify", "alpha")
    assert r.exit_code == 0
    assert "✓ exec: none declared (discovery-only toolkit)" in r.stdout
