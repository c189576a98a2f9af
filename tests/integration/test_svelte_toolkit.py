"""The svelte lane end to end through the CLI: the shipped report-html toolkit (Svelte 5
components compiled inside QuickJS) builds with `wbx toolkit build` and renders HTML from
JSON props with `wbx run`."""

from __future__ import annotations

from pathlib import Path

import pytest

svelte = pytest.importorskip("wbcore_lane_js.svelte")

REPO_TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"
needs_tarballs = pytest.mark.skipif(bool(svelte.missing()),
                                    reason="svelte tarballs not fetched: run `python dev.py warm` once")


@needs_tarballs
def test_wbx_builds_and_runs_the_report_html_toolkit(make_runtime, wbx):
    """The acceptance path: `wbx toolkit build report-html`, then `wbx run report-html`
    with JSON props on stdin; a second build is a cache hit."""
    if not (REPO_TOOLKITS / "report-html").is_dir():
        pytest.skip("toolkits/report-html is not beside this plugin")
    rt = make_runtime(roots=[REPO_TOOLKITS])
    r = wbx("toolkit", "build", "report-html", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "svelte" in r.stderr and "register command report-html" in r.stderr
    r = wbx("run", "report-html", runtime=rt, input=b'{"title": "T", "rows": [{"k": "v"}]}')
    assert r.exit_code == 0, r.stderr
    assert "<h1>T</h1>" in r.stdout and "<td>v</td>" in r.stdout and "1 row<" in r.stdout
    from wbcore_runtime.build import builder

    assert builder.build(rt, "report-html").cached
