"""The ``task`` shape: ``:role task`` recipe blocks, run only when the deployer opts in,
only inside a sandbox tier, never on the host (seed 000, issue 13).

``wbx toolkit run <tk> <task> -- <args>`` finds the block (its ``:name``, else the skill
it is in), picks the tier — the weakest available tier whose record lists ``task`` in its
kinds (the container tier; the microvm tier when installed), or the ``--tier`` asked for if
it is one of them — and runs it there only if :func:`exec_allowed` says the deployer opted
in with ``WB_TOOLKIT_EXEC=1``. Without the opt-in the error says how to enable it and which
tier it would run in. The tier's driver gets a :class:`TaskRequest` (``run_task``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch import tiers as tiering
from wbcore_runtime.dispatch import mounts as granting
from wbcore_runtime.trust import consent
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound
from wbcore_runtime.trust.policy import profile

#: The deployer's opt-in (seed 000: ``exec_allowed?``).
ENV = "WB_TOOLKIT_EXEC"
#: Block languages a task may be written in, and the interpreter inside the sandbox.
INTERPRETERS = {"bash": "/bin/bash", "sh": "/bin/sh", "shell": "/bin/sh"}
MAX_SCRIPT = 256 << 10

_BLOCK_RE = re.compile(r"^[ \t]*#\+begin_src[ \t]+(\S+)([^\n]*)\n(.*?)^[ \t]*#\+end_src\b",
                       re.IGNORECASE | re.MULTILINE | re.DOTALL)
_NAME_RE = re.compile(r":name[ \t]+([A-Za-z0-9][A-Za-z0-9._-]*)")
_ROLE_RE = re.compile(r":role[ \t]+task\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TaskBlock:
    name: str
    lang: str
    script: str
    source: Path


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One task run, as a tier's ``run_task`` gets it."""

    toolkit: str
    task: str
    interpreter: str
    script: str
    args: Sequence[str]
    stdin: bytes
    toolkit_dir: Path
    timeout_s: float
    #: Host folders the deployer granted (``wbx toolkit run --mount``), checked by
    #: ``wbcore_runtime.dispatch.mounts.grant``: ``wbcore_runtime.dispatch.mounts.Mount`` records.
    mounts: tuple[Any, ...] = ()


def exec_allowed(env: Mapping[str, str]) -> bool:
    """Whether the deployer opted in to running ``:role task`` blocks (the one place asked)."""
    return env.get(ENV, "").strip() == "1"


def find_tasks(toolkit: Any) -> list[TaskBlock]:
    """Every ``:role task`` block of ``toolkit``'s manifest and skills, named by ``:name``
    or by the file it is in (``stem``, ``stem-2`` ... for several unnamed blocks)."""
    out: list[TaskBlock] = []
    taken: set[str] = set()
    for path in [toolkit.manifest.path] + [s.path for s in toolkit.skills]:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in _BLOCK_RE.finditer(text):
            lang, header, body = m.group(1).lower(), m.group(2), m.group(3)
            if not _ROLE_RE.search(header):
                continue
            named = _NAME_RE.search(header)
            base = named.group(1) if named else Path(path).stem
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base}-{n}"
            taken.add(name)
            out.append(TaskBlock(name, lang, body, Path(path)))
    return out


def task_tier(runtime: Any, tier: str | None) -> Any:
    """The tier a task runs in: ``tier`` if it runs tasks, else the weakest available one."""
    able = sorted((t for t in runtime.tiers if "task" in t.kinds), key=lambda t: t.rung)
    if not able:
        raise NotFound("tasks run only inside a sandbox tier (container or stronger), and none is installed "
                       "(pip install wbcore-container)")
    if tier is not None:
        chosen = next((t for t in able if t.name == tier), None)
        if chosen is None:
            raise CapabilityDenied(f"tasks never run in tier {tier}: only in "
                                   f"{', '.join(t.name for t in able)} "
                                   "(a sandbox with its own root, no network and no host files)")
        avail = chosen.available()
        if not avail.ok:
            raise NotFound(f"tier {tier} is unavailable here: {avail.reason}")
        return chosen
    reasons = []
    for t in able:
        avail = t.available()
        if avail.ok:
            return t
        reasons.append(f"{t.name}: {avail.reason}")
    raise NotFound(f"tasks run only inside a sandbox tier, and none is available here: {'; '.join(reasons)}")


def run_task(runtime: Any, ident: str, task: str, args: Sequence[str], stdin: bytes, *,
             tier: str | None = None, timeout: float | None = None, mounts: Sequence[Any] = ()) -> Any:
    """Run task ``task`` of toolkit ``ident`` in a sandbox tier; its ``CallResult``.
    ``mounts``: host folders to bind in (as ``wbx run --mount``); ``:rw`` needs the
    toolkit's effective caps (posix profile) to hold ``mount-rw``."""
    tk = runtime.toolkit(ident)
    blocks = find_tasks(tk)
    block = next((b for b in blocks if b.name == task), None)
    if block is None:
        known = ", ".join(b.name for b in blocks) or "none"
        raise NotFound(f"toolkit {ident} has no :role task block named {task!r} (its tasks: {known})")
    interpreter = INTERPRETERS.get(block.lang)
    if interpreter is None:
        raise InvalidArgs(f"task {task} of {ident} is a {block.lang} block; "
                          f"tasks are {', '.join(sorted(INTERPRETERS))}")
    if len(block.script.encode()) > MAX_SCRIPT:
        raise InvalidArgs(f"task {task} of {ident} is over {MAX_SCRIPT >> 10} KiB")
    chosen = task_tier(runtime, tier)
    if not exec_allowed(runtime.env):
        raise CapabilityDenied(f"task {task} of {ident} would run in tier {chosen.name}; "
                               ":role task blocks run only when the deployer opts in: "
                               f"set {ENV}=1 (wbx toolkit run {ident} {task} ...)")

    limit = profile("posix").timeout_s
    granted: tuple[Any, ...] = ()
    if mounts:
        m = tk.manifest
        caps = consent.effective_caps(runtime.home, toolkit_id=ident, trust=m.trust, signer=None,
                                      declared=m.caps, profile=profile("posix"),
                                      universe=runtime.caps_universe_for(m.caps))
        granted = granting.grant(runtime, mounts, tiers=tiering.registry(runtime, "tiers"),
                                 tier=chosen.name, caps=caps, owner=ident, what=f"task {task} of {ident}",
                                 principal="deployer")
    request = TaskRequest(toolkit=ident, task=task, interpreter=interpreter, script=block.script,
                          args=tuple(args), stdin=stdin, toolkit_dir=tk.dir,
                          timeout_s=min(timeout or limit, limit), mounts=granted)
    return chosen.factory(runtime).run_task(request)
