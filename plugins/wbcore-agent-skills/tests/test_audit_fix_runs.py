"""``wbx toolkit audit --fix`` rewrites native calls of registered commands into
``wbx run`` lines that actually run: each rewritten line is run by a real shell with the
real ``wbx`` (the built-in ``jq`` and ``grep``), in the toolkit folder, and checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wbcore_agent_skills import native_audit
from wbcore_testing.fixtures import write_toolkit

SKILL = """\
#+TITLE: Use it

#+begin_src bash
jq -r .title meta.json
$ jq -c .tags data/meta.json
grep -n -m 1 beta notes.txt
jq .a a.json b.json
#+end_src
"""
WANT = {  # rewritten line → its stdout
    "wbx run jq -r .title < meta.json": "Hi\n",
    "$ wbx run jq -c .tags < data/meta.json": '["a","b"]\n',
    "wbx run grep -n -m 1 beta < notes.txt": "2:beta\n",
}


@pytest.mark.slow  # a fresh home compiles the built-in jq and grep (about a minute on two cores)
def test_every_rewritten_command_runs(tmp_path: Path) -> None:
    kit = write_toolkit(tmp_path / "kits", "reader", skills={"overview": "#+TITLE: o\n", "use": SKILL},
                        files={
        "meta.json": json.dumps({"title": "Hi"}),
        "data/meta.json": json.dumps({"tags": ["a", "b"]}),
        "notes.txt": "alpha\nbeta\nbeta again\n",
    })
    report = native_audit.fix(kit, registered=["jq", "grep"])
    assert report.fixed == ["skills/use.org"]
    text = (kit / "skills" / "use.org").read_text()
    lines = [ln for ln in text.splitlines() if "wbx run" in ln]
    assert sorted(lines) == sorted(WANT)
    # two input files cannot both be stdin: kept as it was, and reported as not fixable
    assert "jq .a a.json b.json" in text
    left = [f for f in report.findings if f.kind == "registered-cli"]
    assert len(left) == 1 and not left[0].fixable and "stdin" in left[0].message
    wbx = Path(sys.executable).parent / "wbx"
    env = {**os.environ, "WB_HOME": str(tmp_path / "home"),
           "PATH": f"{wbx.parent}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        cmd = line.removeprefix("$ ")
        done = subprocess.run(["sh", "-c", cmd], cwd=kit, env=env, capture_output=True, text=True,
                              timeout=120)
        assert (done.returncode, done.stdout) == (0, WANT[line]), (cmd, done.stderr)
