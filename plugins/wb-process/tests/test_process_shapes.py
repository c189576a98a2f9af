from __future__ import annotations

from wb_process import plugin


def test_posix_needs_cli_bin_on_path(make_toolkit, make_runtime, tmp_path):
    binary = tmp_path / "bin" / "tool"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    make_toolkit("px", exec="posix", extra={"CLI_BIN": "tool"})
    make_toolkit("nobin", exec="posix")
    rt = make_runtime(plugins=[plugin], env={"PATH": str(binary.parent)})
    assert rt.verify("px").ok
    lines = [c.render() for c in rt.verify("nobin").checks]
    assert "✗ exec: posix toolkits need #+CLI_BIN (a native binary on PATH)" in lines
    rt = make_runtime(plugins=[plugin], env={"PATH": str(tmp_path)})
    assert not rt.verify("px").ok


def test_task_blocks_are_counted_and_never_run(make_toolkit, make_runtime):
    skill = "#+TITLE: release\n#+begin_src bash :role task\ntouch /tmp/never-created-by-wbcore\n#+end_src\n"
    make_toolkit("tk", exec="task", skills={"overview": "#+TITLE: o\n", "release": skill})
    r = make_runtime(plugins=[plugin]).verify("tk")
    assert r.ok
    lines = [c.render() for c in r.checks]
    assert "✓ exec: task recipes: 1 :role task block(s); structural check only" in lines
    assert any(line.startswith("⚠ exec: native :role bash execution is banned") for line in lines)
