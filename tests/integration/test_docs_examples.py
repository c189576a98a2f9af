"""Every command example in README.md and docs/*.md runs, or says why it cannot.

A fenced block labelled ``sh``, ``bash``, ``shell`` or ``console`` is an example a reader will
paste. Each one is run here, in document order, as a bash script with ``set -eo pipefail``, in a
scratch folder holding a copy of the shipped toolkits, with a fresh ``WB_HOME``, the
repository's ``.venv/bin`` first on ``PATH`` and no other ``WB_*`` setting; it must exit 0. A
``console`` block runs its ``$ `` lines (with their ``\\`` continuations and here-documents);
the other lines are the output it shows, and each one that elides nothing (no ``…``) and names
no time must appear in what the commands printed. The demo's local web site (:mod:`wbcore_demo.demosite`: a
page, a JSON API, a PEP 503 index, a paged REST API) serves on 127.0.0.1 for the whole run, its base URL
in ``$WB_DEMO_SITE``; as for any reader, loopback stays closed to guests and sources until the
example itself allows it (``WB_ALLOW_PRIVATE_HOSTS``, as ``wbx demo`` does for its own process).

A block that cannot run here says so on the line right before its fence, with a reason:

    <!-- not-runnable: needs a Ray cluster -->
    <!-- slow: builds text-tools with componentize-py (~25 s) -->

``not-runnable`` blocks are never run; ``slow`` ones run in the slow suite only. A fence with
no label whose first line is a command (``$ …``, ``wbx …``, ``pip …``, ``python …``,
``export …``, ``VAR=… cmd``) is refused: label it, so no example is skipped silently. So is
an indented code block (four spaces after a blank line; each part of one after a blank line)
whose first line is a command: fence it, ```sh to run (or mark) it, ```text for a synopsis.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from wbcore_demo.demosite import DemoSite

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = ("sh", "bash", "shell", "console")
MARKS = ("not-runnable", "slow")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(?P<kind>[a-z-]+)\s*:\s*(?P<reason>.*?)\s*-->\s*$")
TIMED = re.compile(r"\d(\.\d+)? ?(ms|s)\b|\b\d{8}T\d{6}|/tmp/|\"wall_s\"")  # times and run folders vary
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")
# The first line of an unlabelled fence that is a command a reader would type.
LOOKS_LIKE_A_COMMAND = re.compile(r"^\s*(\$ |wbx |pip |python3? |export |[A-Z_]+=\S+ +\S)")
MACHINE_CACHES = ("WB_ZIG_CACHE", "WB_GO_CACHE", "WB_NPM_CACHE", "WB_JQ_CACHE", "WB_MICROVM_CACHE")
TIMEOUT_S = 180  # one default-suite block; a slow one gets SLOW_TIMEOUT_S
SLOW_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its label, its text and the mark before it (if any)."""

    doc: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    mark: str = ""  # "", "not-runnable", "slow", or an unknown word (refused)
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def script(self) -> str:
        """What bash runs: the block itself, or a console block's ``$`` lines and their continuations."""
        if self.lang != "console":
            return self.text
        out: list[str] = []
        continued, heredoc = False, ""
        for ln in self.text.splitlines():
            if heredoc:  # a here-document's body, up to its terminator, is the command's input
                out.append(ln)
                heredoc = "" if ln.strip() == heredoc else heredoc
                continue
            if continued:
                out.append(ln)
            elif ln.startswith("$ "):
                out.append(ln[2:])
            else:
                continue
            continued = ln.rstrip().endswith("\\")
            opened = HEREDOC.search(ln)
            heredoc = opened["word"] if opened else ""
        return "\n".join(out) + "\n"


    def shown_output(self) -> list[str]:
        """A console block's output lines a reader can expect verbatim: every line that is not a
        command, its continuation or here-document, and does not elide (``…``) or time (``ms``)."""
        if self.lang != "console":
            return []
        script = set(self.script().splitlines())
        return [ln.strip() for ln in self.text.splitlines()
                if ln.strip() and not ln.startswith("$ ") and ln not in script and "…" not in ln
                and not TIMED.search(ln)]


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path, root: Path = ROOT) -> Iterator[Block]:
    """Every fenced block of one Markdown file, with the mark on the line before its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = str(path.relative_to(root))
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent = m["indent"]
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]) + "\n"
        mark = MARK.match(lines[i - 1]) if i > 0 else None
        kind, reason = (mark["kind"], mark["reason"]) if mark else ("", "")
        yield Block(rel, i + 1, m["lang"], body, kind, reason)
        i = j + 1


def indented_commands(path: Path, root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """``(doc:line, first line)`` of each indented code block outside fences whose first line
    is a command a reader would type: Markdown shows it as code, and no fence label says
    whether it runs. A line indented under a list item or a paragraph is not such a block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = str(path.relative_to(root))
    fenced, before = False, ""  # before: the last non-blank line outside a block
    for i, ln in enumerate(lines):
        if FENCE.match(ln) or (fenced and ln.strip() == "```"):
            fenced = not fenced
            before = ln
            continue
        if fenced or not ln.strip():
            continue
        starts = ln.startswith("    ") and i > 0 and not lines[i - 1].strip()
        under = before.startswith(" ") or re.match(r"^\s*([-*+]|\d+[.)])\s", before)
        if starts and not under and LOOKS_LIKE_A_COMMAND.match(ln):
            yield f"{rel}:{i + 1}", ln.strip()
        if not ln.startswith("    "):
            before = ln


def every_block() -> list[Block]:
    return [b for p in docs() for b in blocks(p)]


def shell_blocks() -> list[Block]:
    return [b for b in every_block() if b.lang in SHELL_LANGS]


def test_every_command_block_is_run_or_marked_with_a_reason() -> None:
    problems: list[str] = []
    for b in every_block():
        if b.lang == "" and LOOKS_LIKE_A_COMMAND.match(b.text.lstrip("\n").splitlines()[0]
                                                       if b.text.strip() else ""):
            problems.append(f"{b.id}: a command example in an unlabelled fence: label it ```sh or ```console "
                            "so this test runs it (or marks it)")
        if b.mark and b.mark not in MARKS:
            problems.append(f"{b.id}: unknown mark '<!-- {b.mark}: … -->'; known: {', '.join(MARKS)}")
        if b.mark and not b.reason:
            problems.append(f"{b.id}: '<!-- {b.mark}: -->' needs a reason after the colon")
        if b.lang in SHELL_LANGS and b.mark != "not-runnable" and not b.script().strip():
            problems.append(f"{b.id}: a ```{b.lang} block with nothing to run (a console block's commands "
                            "start with '$ ')")
        if b.mark and b.lang not in SHELL_LANGS:
            problems.append(f"{b.id}: a '{b.mark}' mark on a ```{b.lang} block, which is never run")
    for p in docs():
        for where, first in indented_commands(p):
            problems.append(f"{where}: a command example in an indented block ({first[:60]}): fence it, "
                            "```sh so this test runs it (or marks it), ```text for a synopsis")
    assert not problems, "\n".join(problems)
    assert len(shell_blocks()) >= 20  # the extraction found the docs' examples


def test_the_extraction_reads_marks_fences_and_console_prompts(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("text\n<!-- not-runnable: needs a cluster -->\n```sh\nray start\n```\n\n"
                  "```console\n$ echo a \\\n    b\na b\n$ cat <<'EOF'\nx\nEOF\nx\n$ true\n```\n",
                  encoding="utf-8")
    first, second = list(blocks(md, tmp_path))
    assert (first.mark, first.reason, first.lang, first.line) == ("not-runnable", "needs a cluster", "sh", 3)
    assert second.mark == "" and second.script() == "echo a \\\n    b\ncat <<'EOF'\nx\nEOF\ntrue\n"
    assert second.shown_output() == ["a b"]  # "x" is also a line of the script: not checked
    md.write_text("Run it:\n\n    wbx run upper\n\n- a list item\n\n    wbx run nested-in-the-item\n\n"
                  "```text\n    wbx run in-a-fence\n```\n\nText\n    wbx run in-a-paragraph\n",
                  encoding="utf-8")
    assert list(indented_commands(md, tmp_path)) == [("x.md:3", "wbx run upper")]


# ---- running them ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site() -> Iterator[DemoSite]:
    with DemoSite() as s:
        yield s


@dataclass
class Reader:
    """One page's reader: a folder holding a copy of the shipped toolkits (examples write
    beside them) and links to the repository's read-only folders an example names, and a
    fresh home. The blocks of one page share it, in order; pages never share one."""

    work: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def readers() -> dict[str, Reader]:
    return {}


def _reader(readers: dict[str, Reader], doc: str, site: DemoSite,
            tmp_path_factory: pytest.TempPathFactory) -> Reader:
    if doc in readers:
        return readers[doc]
    work = tmp_path_factory.mktemp("docs-" + Path(doc).stem)
    shutil.copytree(ROOT / "toolkits", work / "toolkits", symlinks=False)
    for name in ("tests", "bench", "plugins", "wit", "dev.py"):
        (work / name).symlink_to(ROOT / name)
    home = work / ".home"
    # no WB_* setting of this shell reaches a reader, but the machine's compiler and image
    # caches (warmed once per machine by dev.py setup) are where CI put them
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("WB_", "OTEL_", "PYTEST_")) or k in MACHINE_CACHES}
    env = {**base, "WB_HOME": str(home),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{base.get('PATH', '')}", "WB_DEMO_SITE": site.url,
           "VIRTUAL_ENV": str(ROOT / ".venv"), "PWD": str(work)}
    readers[doc] = Reader(work, env)
    return readers[doc]


def _params() -> list[object]:
    out: list[object] = []
    for b in shell_blocks():
        if b.mark == "not-runnable":
            continue
        marks = [pytest.mark.slow] if b.mark == "slow" else []
        out.append(pytest.param(b, id=b.id, marks=marks))
    return out


@pytest.mark.parametrize("block", _params())
def test_docs_example_runs(block: Block, readers: dict[str, Reader], site: DemoSite,
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    if not (ROOT / ".venv" / "bin" / "wbx").exists():
        pytest.skip("no .venv/bin/wbx: run `python3 dev.py setup` first")
    reader = _reader(readers, block.doc, site, tmp_path_factory)
    timeout = SLOW_TIMEOUT_S if block.mark == "slow" else TIMEOUT_S
    script = "set -eo pipefail\n" + block.script()
    started = time.monotonic()
    # Its own session: a block may leave a server in the background (`wbx engine serve &`);
    # the whole group is ended when the block is done.
    proc = subprocess.Popen(["bash", "-c", script], cwd=reader.work, env=reader.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{block.id}: still running after {timeout} s\n--- stdout\n{out.decode()[-2000:]}\n"
                    f"--- stderr\n{err.decode()[-2000:]}")
    finally:
        _end_group(proc)
    said = (out + err).decode(errors="replace")
    missing = [ln for ln in block.shown_output() if ln not in said]
    assert proc.returncode == 0 and not missing, (
        f"{block.id} exited {proc.returncode} after {time.monotonic() - started:.1f} s\n--- script\n{script}"
        f"--- output the page shows that did not appear: {missing}\n"
        f"--- stdout\n{out.decode(errors='replace')[-3000:]}\n"
        f"--- stderr\n{err.decode(errors='replace')[-3000:]}")


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """End what the block left running: its process group (this test started it), by its id."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
