from __future__ import annotations

from wbcore_process import plugin


def test_task_blocks_are_counted_and_never_run(make_toolkit, make_runtime):
    skill = "#+TITLE: release\n#+begin_src bash :role task\ntouch /tmp/never-created-by-wbcore\n#+end_src\n"
    make_toolkit("tk", exec="task", skills={"overview": "#+TITLE: o\n", "release": skill})
    r = make_runtime(plugins=[plugin]).verify("tk")
    assert r.ok
    lines = [c.render() for c in r.checks]
    assert "✓ exec: task recipes: 1 :role task block(s); structural check only" in lines
    assert any(line.startswith("⚠ exec: native :role bash execution is banned") for line in lines)
