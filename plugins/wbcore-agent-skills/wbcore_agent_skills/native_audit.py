"""``wbx toolkit audit``: what in a toolkit folder assumes native execution, and what can be fixed.

Nothing from a toolkit runs natively. The audit reports, per file and line:

- scripts (``scripts/``, a ``#!`` line, or a script suffix): native programs; they must
  become a built command (``#+BUILD_SRC`` + a lane) to run at all;
- shell blocks in skills that call a CLI that is not a registered command
  (``jq``, ``curl`` …) or run a script through an interpreter (``python x.py``);
- shell blocks that call a registered command natively (fixable: ``wbx run <cmd> …``);
- Markdown code fences left in Org files (fixable: ``#+begin_src`` blocks);
- native CLIs not declared in ``#+REQUIRES`` (fixable: the keyword is added);
- ``:role pre`` blocks (reported; they are disabled, never run).

``--fix`` rewrites what can be rewritten, atomically per file, and reports what is left.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_agent_skills import markup
from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.contract.errors import WbError
from wbcore_agent_skills.skill_import import ORIGINAL_DIR

SCRIPT_SUFFIXES = (
    ".sh", ".bash", ".zsh", ".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".ps1", ".bat", ".cmd", ".php",
    ".lua",
)
SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh", "console", "shell-session", "fish"})
#: Transcripts: only ``$ `` prompt lines are commands, the rest is output.
SESSION_LANGS = frozenset({"console", "shell-session"})
INTERPRETERS = frozenset(
    {
        "python", "python3", "python2", "node", "deno", "bun", "bash", "sh", "zsh", "ruby", "perl", "php",
        "lua", "pwsh", "powershell", "npx", "uv", "uvx", "pipx", "tsx", "ts-node",
    }
)
SHELL_WORDS = frozenset(
    {
        "cd", "echo", "export", "set", "unset", "alias", "source", ".", "test", "[", "[[", "true", "false",
        "printf", "read", "if", "then", "else", "elif", "fi", "for", "in", "do", "done", "while", "until",
        "case", "esac", "function", "return", "exit", "local", "shift", "wait", "trap", "eval", "{", "}", "(",
        ")", "!", "wbx", "wb",
    }
)
PREFIX_WORDS = frozenset({"sudo", "env", "time", "exec", "nohup", "command", "builtin", "xargs"})
MAX_SCAN_BYTES = 1 << 20
_BEGIN_RE = re.compile(r"^(\s*)#\+begin_src\s+(\S+)([^\n]*)$", re.IGNORECASE)
_END_RE = re.compile(r"^\s*#\+end_src\b", re.IGNORECASE)
_PRE_RE = re.compile(r":role\s+pre\b", re.IGNORECASE)
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REQUIRES_RE = re.compile(r"^#\+REQUIRES:[ \t]*(.*)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # script, native-cli, interpreter, registered-cli, markdown, requires, pre-block
    path: str
    line: int
    message: str
    fixable: bool = False
    name: str = ""

    def render(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{'fixable' if self.fixable else 'native '}  {where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "line": self.line, "message": self.message,
                "fixable": self.fixable, "name": self.name}


@dataclass
class Report:
    root: Path
    findings: list[Finding] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    @property
    def native(self) -> list[Finding]:
        return [f for f in self.findings if not f.fixable]

    def as_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "findings": [f.as_dict() for f in self.findings], "fixed": self.fixed}


#: Words that open a compound command or negate one: the command follows them.
SHELL_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
#: English words that start prose lines pasted into shell blocks; never a command's name.
PROSE_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "from", "is", "it", "its", "not", "of", "on",
        "or", "that", "the", "these", "this", "those", "to", "with", "you", "your",
    }
)
_COMMAND_RE = re.compile(r"^[A-Za-z_.~/][\w.+~/-]*$")
_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w]*)\1")


def _segments(text: str) -> list[str]:
    """The pieces of one logical shell line that start in command position: the line's start
    and whatever follows ``|``, ``||``, ``&&``, ``;``, ``&``, ``(``, ``$(`` or a backquote.
    Text after a substitution closes (``"$(date) and more"``) continues its argument list and
    is not a command. Quotes are respected; a ``#`` at a word start ends the line."""
    out: list[str] = []
    cur: list[str] = []
    at_command = True
    stack: list[str] = []  # '"', '$(' or '`' contexts still open

    def cut(next_at_command: bool) -> None:
        nonlocal at_command
        if at_command:
            out.append("".join(cur))
        cur.clear()
        at_command = next_at_command

    i, n = 0, len(text)
    while i < n:
        c = text[i]
        top = stack[-1] if stack else ""
        if c == "\\" and i + 1 < n:
            cur.append(text[i : i + 2])
            i += 2
            continue
        if top == '"':
            if c == '"':
                stack.pop()
            elif text.startswith("$(", i):
                cut(True)
                stack.append("$(")
                i += 2
                continue
            elif c == "`":
                cut(True)
                stack.append("`")
                i += 1
                continue
            cur.append(c)
            i += 1
            continue
        if c == "'":
            j = text.find("'", i + 1)
            j = n - 1 if j < 0 else j
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c == '"':
            stack.append('"')
            cur.append(c)
        elif text.startswith("$(", i) and not text.startswith("$((", i):
            cut(True)
            stack.append("$(")
            i += 2
            continue
        elif c == "`":
            if top == "`":
                stack.pop()
                cut(False)
            else:
                cut(True)
                stack.append("`")
        elif c == ")":
            if top == "$(":
                stack.pop()
            cut(False)
        elif c == "&" and (text.startswith("&>", i) or (i and text[i - 1] in "<>")):
            cur.append(c)  # a redirection (2>&1, &>file), not a separator
        elif c in "|;&(":
            cut(True)
            if text.startswith(("||", "&&", ";;"), i):
                i += 1
        elif c == "#" and (not cur or "".join(cur)[-1:].isspace()):
            break
        else:
            cur.append(c)
        i += 1
    cut(False)
    return out


def _command(segment: str) -> tuple[str, list[str]] | None:
    """(command, args) of one segment in command position, or ``None`` if it names none."""
    try:
        words = shlex.split(segment, comments=True)
    except ValueError:
        words = segment.split()
    while words and (_ASSIGN_RE.match(words[0]) or words[0] in SHELL_KEYWORDS):
        words = words[1:]
    while words and words[0] in PREFIX_WORDS:
        words = words[1:]
        while words and (words[0].startswith("-") or _ASSIGN_RE.match(words[0])):
            words = words[1:]  # the prefix's own options (env -i, sudo -E) and env's assignments
    if not words:
        return None
    cmd = words[0]
    if not _COMMAND_RE.match(cmd) or cmd.lower() in PROSE_WORDS or not re.search(r"[A-Za-z]", cmd):
        return None  # a number, an operator, a redirection or an English word: no command here
    return cmd, words[1:]


def commands_in(line: str) -> list[tuple[str, list[str]]]:
    """The (command, args) of each command in one logical shell line: the first word of each
    pipeline segment (after ``|``, ``&&``, ``;``, ``$(`` …), never an argument, a number or prose."""
    s = line.strip()
    if not s or s.startswith("#"):
        return []
    if s.startswith("$ "):
        s = s[2:]
    elif s.startswith(("> ", "... ")):
        return []
    return [c for c in (_command(seg) for seg in _segments(s)) if c is not None]


def shell_lines(lines: Iterable[str], *, session: bool = False) -> list[tuple[int, str]]:
    """The logical command lines of a shell block, each with its first line's index: ``\\``
    continuations joined, here-document bodies skipped; in a session transcript
    (``console``) only ``$ `` prompt lines are commands, the rest is output."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    heredoc: str | None = None
    for i, raw in enumerate(lines):
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        if pending is not None:
            start, text = pending[0], pending[1] + " " + raw.strip()
        elif session and not raw.lstrip().startswith("$ "):
            continue
        else:
            start, text = i, raw
        if text.rstrip().endswith("\\"):
            pending = (start, text.rstrip()[:-1])
            continue
        pending = None
        out.append((start, text))
        m = _HEREDOC_RE.search(text)
        if m:
            heredoc = m.group(2)
    if pending is not None:
        out.append(pending)
    return out


def _text(root: Path, rel: str) -> str | None:
    """A toolkit file's text, read through containment (:mod:`wbcore_runtime.guard.paths`); ``None`` when it
    is refused, too big for a scan or not UTF-8."""
    try:
        return paths.read_file(root, rel, MAX_SCAN_BYTES).decode("utf-8")
    except (OSError, WbError, UnicodeDecodeError):
        return None


def _is_script(root: Path, rel: str) -> bool:
    if rel.startswith("scripts/") or Path(rel).suffix.lower() in SCRIPT_SUFFIXES:
        return True
    try:
        with paths.open_file(root, rel) as fh:
            return fh.read(2) == b"#!"
    except (OSError, WbError):
        return False


def _declared_requires(manifest_text: str) -> set[str]:
    m = _REQUIRES_RE.search(manifest_text)
    if not m:
        return set()
    return {re.split(r"[<>=@ ]", w.strip())[0] for w in re.split(r"[,\s]+", m.group(1)) if w.strip()}


def audit(root: Path, registered: Iterable[str] = ()) -> Report:
    """Scan ``root`` (a toolkit folder). ``registered``: command names that run sandboxed."""
    registered = set(registered)
    report = Report(root)
    add = report.findings.append
    manifest_text = _text(root, "manifest.org") or ""
    cli_bin = re.search(r"^#\+CLI_BIN:[ \t]*(\S+)", manifest_text, re.MULTILINE)
    own = {cli_bin.group(1)} if cli_bin else set()
    declared = _declared_requires(manifest_text)
    native_clis: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        # The import's kept copy of an Agent Skills package (skill_import.ORIGINAL_DIR) repeats
        # the files audited at their own paths: one finding per file, not two.
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__")
                             and not (dirpath == str(root) and d == ORIGINAL_DIR))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if name.startswith(".") or path.is_symlink():
                continue
            if rel.endswith(".org"):
                _scan_org(rel, _text(root, rel) or "", registered | own, native_clis, add)
            elif _is_script(root, rel):
                add(Finding("script", rel, 0, "a script: runs only natively (nothing from a toolkit does); "
                            "make it a built command (#+BUILD_SRC + a lane) or remove it", name=name))
    for cli, (rel, line) in sorted(native_clis.items()):
        if cli not in declared:
            add(
                Finding(
                    "requires", "manifest.org", 0,
                    f"{cli} is assumed (first in {rel}:{line}) but not declared in #+REQUIRES",
                    fixable=True,
                    name=cli,
                )
            )
    return report


def _scan_org(rel: str, text: str, registered: set[str], native: dict[str, tuple[str, int]],
              add: Callable[[Finding], None]) -> None:
    lang: str | None = None
    block: list[tuple[int, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if lang is None:
            m = _BEGIN_RE.match(line)
            if m:
                lang = m.group(2).lower()
                block = []
                if _PRE_RE.search(m.group(3)):
                    add(
                        Finding(
                            "pre-block", rel, no,
                            ":role pre block: disabled, never run (native exec is banned)",
                        )
                    )
                continue
            if _FENCE_RE.match(line):
                add(
                    Finding(
                        "markdown", rel, no,
                        "a Markdown code fence in an Org file (an agent sees no code block)", fixable=True,
                    )
                )
            continue
        if _END_RE.match(line):
            if lang in SHELL_LANGS:
                _scan_shell(rel, block, lang in SESSION_LANGS, registered, native, add)
            lang = None
            continue
        block.append((no, line))
    if lang in SHELL_LANGS:
        _scan_shell(rel, block, lang in SESSION_LANGS, registered, native, add)


def _scan_shell(rel: str, block: list[tuple[int, str]], session: bool, registered: set[str],
                native: dict[str, tuple[str, int]], add: Callable[[Finding], None]) -> None:
    raw = [markup._unescape_block_line(line) for _, line in block]
    for index, logical in shell_lines(raw, session=session):
        no, line = block[index]
        for cmd, args in commands_in(logical):
            base = os.path.basename(cmd)
            if base in SHELL_WORDS:
                continue
            if base in registered:
                fixed = _rewrite_line(line, registered) if logical == raw[index] else line
                if fixed != line:
                    add(
                        Finding(
                            "registered-cli", rel, no,
                            f"runs {base} natively; it is a registered command: {fixed.strip()}",
                            fixable=True, name=base,
                        )
                    )
                else:
                    add(
                        Finding(
                            "registered-cli", rel, no,
                            f"runs {base} natively; it is a registered command: rewrite "
                            f"it as wbx run {base} … with its one input on stdin (the sandbox sees no files)",
                            name=base,
                        )
                    )
            elif base in INTERPRETERS:
                target = next((a for a in args if not a.startswith("-")), "")
                add(
                    Finding(
                        "interpreter", rel, no, f"runs {target or 'code'} natively through {base}", name=base
                    )
                )
                native.setdefault(base, (rel, no))
            elif "/" in cmd or cmd.endswith(SCRIPT_SUFFIXES):
                add(Finding("interpreter", rel, no, f"runs the script {cmd} natively", name=cmd))
            else:
                add(
                    Finding(
                        "native-cli", rel, no, f"calls {base}, which is not a registered command", name=base
                    )
                )
                native.setdefault(base, (rel, no))


# --- fixes ----------------------------------------------------------------------------


#: Commands whose first operand is a program or pattern, never an input file, and their
#: options that take a value (the built-in ``jq`` and ``grep``).
PROGRAM_FIRST: dict[str, frozenset[str]] = {"jq": frozenset(), "grep": frozenset({"-m"})}
_FILE_RE = re.compile(
    r"^(?!-)(?!\.)[\w.@+-]*(/[\w.@+-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}$|^(?!-)[\w.@+-]*/[\w./@+-]*$"
)


def _looks_like_file(word: str) -> bool:
    return bool(_FILE_RE.match(word)) and "*" not in word


def _rewrite_line(line: str, registered: set[str]) -> str:
    """``cmd args… file`` → ``wbx run cmd args… < file``: the command runs sandboxed with no
    files, so its one input file becomes stdin (read by the host shell). Lines this cannot
    rewrite so that they run (two input files, pipes, redirections, substitutions) are kept."""
    indent = line[: len(line) - len(line.lstrip())]
    s = line.strip()
    prompt = ""
    if s.startswith("$ "):
        prompt, s = "$ ", s[2:]
    try:
        words = shlex.split(s)
    except ValueError:
        return line
    if not words or os.path.basename(words[0]) not in registered or any(c in s for c in "|;&<>`$("):
        return line
    name = os.path.basename(words[0])
    args = words[1:]
    takes_value = PROGRAM_FIRST.get(name, frozenset())
    program_pending = name in PROGRAM_FIRST
    files: list[int] = []
    options_done = False
    i = 0
    while i < len(args):
        word = args[i]
        if not options_done and word == "--":
            options_done = True
        elif not options_done and word in takes_value:
            i += 1
        elif not options_done and word.startswith("-") and word != "-":
            pass
        elif program_pending:
            program_pending = False
        elif _looks_like_file(word):
            files.append(i)
        i += 1
    if len(files) > 1:
        return line
    redirect = ""
    if files:
        redirect = " < " + shlex.quote(args[files[0]])
        args = args[: files[0]] + args[files[0] + 1:]
    return indent + prompt + f"wbx run {name}" + "".join(" " + shlex.quote(a) for a in args) + redirect


def _fix_org(text: str, registered: set[str]) -> str:
    lines = text.splitlines()
    out: list[str] = []
    lang: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if lang is None:
            m = _BEGIN_RE.match(line)
            if m:
                lang = m.group(2).lower()
                out.append(line)
            elif _FENCE_RE.match(line):
                fence = line.strip()[:3]
                j = i + 1
                while j < len(lines) and not lines[j].strip().startswith(fence):
                    j += 1
                block = "\n".join(lines[i : j + 1])
                out.extend(markup.md_to_org(block).rstrip("\n").splitlines())
                i = j + 1
                continue
            else:
                out.append(line)
        elif _END_RE.match(line):
            lang = None
            out.append(line)
        elif lang in SHELL_LANGS:
            out.append(_rewrite_line(line, registered))
        else:
            out.append(line)
        i += 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _add_requires(manifest_text: str, clis: list[str]) -> str:
    m = _REQUIRES_RE.search(manifest_text)
    if m:
        have = [w for w in re.split(r"[,\s]+", m.group(1)) if w]
        merged = have + [c for c in clis if c not in _declared_requires(manifest_text)]
        return manifest_text[: m.start()] + "#+REQUIRES: " + ", ".join(merged) + manifest_text[m.end():]
    lines = manifest_text.splitlines(keepends=True)
    last = max(
        (
            i
            for i, ln in enumerate(lines)
            if ln.startswith("#+")
            and not ln.lower().startswith("#+begin")
            and i < next((k for k, x in enumerate(lines) if x.startswith("*")), len(lines))
        ),
        default=-1,
    )
    lines.insert(last + 1, "#+REQUIRES: " + ", ".join(clis) + "\n")
    return "".join(lines)


def fix(root: Path, registered: Iterable[str] = ()) -> Report:
    """Apply every fixable rewrite, then audit again; ``fixed`` lists the files changed."""
    registered = set(registered)
    before = audit(root, registered)
    manifest_text = _text(root, "manifest.org") or ""
    cli_bin = re.search(r"^#\+CLI_BIN:[ \t]*(\S+)", manifest_text, re.MULTILINE)
    reg = registered | ({cli_bin.group(1)} if cli_bin else set())
    changed: list[str] = []
    for rel in sorted(
        {f.path for f in before.findings if f.fixable and f.kind in ("markdown", "registered-cli")}
    ):
        path = root / rel
        text = _text(root, rel)
        if text is None:
            continue
        new = _fix_org(_fix_org(text, reg), reg)  # the second pass rewrites blocks the first made from fences
        if new != text:
            atomic_write(path, new.encode("utf-8"), mode=None)
            changed.append(rel)
    missing = [f.name for f in before.findings if f.kind == "requires"]
    if missing and (root / "manifest.org").is_file():
        text = _text(root, "manifest.org") or ""
        new = _add_requires(text, missing)
        if new != text:
            atomic_write(root / "manifest.org", new.encode("utf-8"), mode=None)
            if "manifest.org" not in changed:
                changed.append("manifest.org")
    after = audit(root, registered)
    after.fixed = changed
    return after
