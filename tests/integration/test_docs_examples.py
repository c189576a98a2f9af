"""Every shell example in README.md and docs/*.md runs, or says why it cannot.

A fenced block whose info string is ``sh``, ``bash``, ``shell`` or ``console`` is run in a fresh
home (``WB_HOME`` in a temporary folder, the working folder holding a copy of the shipped
toolkits, this environment's ``wbx`` first on PATH, no network beyond loopback) and must exit 0.
A ``console`` block's commands are its ``$ `` lines (with their ``\\`` continuations); every other
line is output the run must print, except lines that carry a timing or a temporary path.
A block that cannot run here carries ``<!-- not-runnable: why -->`` on the line before its fence;
a new example without either fails this test, so the docs cannot drift silently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(sh|bash|shell|console)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"^<!--\s*not-runnable:\s*(.*?)\s*-->$")
#: Output lines that differ from run to run: timings and temporary folders.
VOLATILE = re.compile(r"\d+(?:\.\d+)?\s*ms\b|/tmp/|\b\d{8}T\d{6}-")


@dataclass(frozen=True)
class Example:
    where: str  # path:line of the fence
    kind: str
    text: str
    not_runnable: str | None

    @property
    def script(self) -> str:
        if self.kind != "console":
            return self.text
        cmds: list[str] = []
        going = False
        for line in self.text.splitlines():
            if line.startswith("$ ") or going:
                cmds.append(line[2:] if line.startswith("$ ") else line)
                going = line.endswith("\\")
        return "\n".join(cmds) + "\n"

    @property
    def expected(self) -> list[str]:
        if self.kind != "console":
            return []
        out, going = [], False
        for line in self.text.splitlines():
            if line.startswith("$ ") or going:
                going = line.endswith("\\")
                continue
            if line.strip() and not VOLATILE.search(line):
                out.append(line.strip())
        return out


def examples() -> list[Example]:
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            mark = MARK.match(before)
            line = text.count("\n", 0, m.start()) + 1
            found.append(Example(f"{doc.relative_to(REPO)}:{line}", m.group(1), m.group(2),
                                 mark.group(1) if mark else None))
    return found


ALL = examples()
RUNNABLE = [e for e in ALL if e.not_runnable is None]


def test_every_example_is_run_or_says_why_not() -> None:
    assert ALL, "no shell examples found: the fence pattern no longer matches the docs"
    empty = [e.where for e in ALL if e.not_runnable is not None and len(e.not_runnable) < 10]
    assert not empty, f"a not-runnable mark must say why: {empty}"
    # the runner must keep running real examples, not only marks
    assert len(RUNNABLE) >= 3, [e.where for e in RUNNABLE]


@pytest.mark.parametrize("example", RUNNABLE, ids=[e.where for e in RUNNABLE])
def test_example_runs(example: Example, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "toolkits", work / "toolkits", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    env.update(WB_HOME=str(tmp_path / "home"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               WB_ZIG_CACHE=os.environ.get("WB_ZIG_CACHE", str(Path.home() / ".cache" / "wbcore" / "zig")))
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", example.script], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{example.where} exited {r.returncode}\n--- script\n{example.script}--- stderr\n{r.stderr[-3000:]}"
    printed = {line.strip() for line in (r.stdout + "\n" + r.stderr).splitlines()}
    missing = [line for line in example.expected if line not in printed]
    assert not missing, f"{example.where}: the docs show output the run did not print: {missing}\n--- stdout\n{r.stdout[-3000:]}"
