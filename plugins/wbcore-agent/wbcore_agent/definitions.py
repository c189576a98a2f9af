"""Agent definitions authored as Org (seed 004 "Agent definitions") and their toolkit index.

The first headline tagged ``:agent:`` is the agent. Its drawer gives ``:ID:``,
``:MODEL:``, ``:TOOLKITS:`` (space- or comma-separated, in order), ``:REACH:``, ``:TAGLINE:`` and
``:TOOL_CHOICE:`` (one choice per step — ``auto``, ``required``, ``none`` or a tool's name —
the last one holding for every later step; see :func:`tool_choice_at`).

``:TOOLKITS:`` is the allowlist: the agent's tools, its shell and every command it reaches
through ``commands`` / ``exec`` / ``parallel`` are limited to those toolkits plus the
reserved built-ins (:meth:`AgentDef.allowlist`, enforced by ``wbcore_runtime.dispatch.dispatcher``).
``:REACH:`` opts into more: further toolkit ids its commands may call (not offered as
tools, not in the index), or ``*`` for every registered command.
The system prompt is read only from under a ``** System prompt`` child heading; with
no such heading it falls back to the node's own body, so an agent authored as a plain
definition never silently runs prompt-less.

The injected index is progressive disclosure, tier 1: one line per declared toolkit
(unknown names dropped, never a crash) and up to eight skill names; skill bodies stay
on demand (``wbx toolkit show <id> <skill>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs, ManifestError
from wbcore_runtime.toolkit.manifest import read_text, subtree_text

MAX_INDEX_SKILLS = 8
SYSTEM_PROMPT_HEADING = "system prompt"
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True)
class AgentDef:
    id: str
    model: str | None
    toolkits: tuple[str, ...]
    tagline: str
    system_prompt: str
    path: Path | None = None
    title: str = ""
    #: ``:REACH:``: more toolkits its commands may reach, or ``("*",)`` for every command.
    reach: tuple[str, ...] = ()

    def allowlist(self) -> frozenset[str] | None:
        """The toolkits this agent's calls may reach (``:TOOLKITS:`` + ``:REACH:``), or
        ``None`` when ``:REACH: *`` opts out of the allowlist."""
        if "*" in self.reach:
            return None
        return frozenset(self.toolkits) | frozenset(self.reach)

    #: ``:TOOL_CHOICE:``: the tool choice of steps 1, 2, …; the last holds after them.
    tool_choice: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "model": self.model, "toolkits": list(self.toolkits), "reach": list(self.reach),
            "tagline": self.tagline, "system_prompt": self.system_prompt,
            "path": str(self.path) if self.path else None, "title": self.title,
            "tool_choice": list(self.tool_choice),
        }


def parse(text: str, path: Path | str | None = None) -> AgentDef:
    """Parse agent Org text; a file without an ``:agent:`` node is an ``InvalidArgs``."""
    import orgparse

    where = Path(path) if path else Path("agent.org")
    try:
        root = orgparse.loads(text, filename=str(where))
    except Exception as exc:  # orgparse raising on odd input is a malformed definition
        raise ManifestError(where, 1, "org", f"cannot parse as Org: {type(exc).__name__}: {exc}") from None
    node = next((n for n in root[1:] if "agent" in n.shallow_tags), None)
    if node is None:
        raise InvalidArgs(f"{where}: no headline tagged :agent:")
    props = {str(k).upper(): str(v).strip() for k, v in node.properties.items()}
    prompt_node = next((c for c in node.children if c.heading.strip().lower() == SYSTEM_PROMPT_HEADING), None)
    prompt = subtree_text(prompt_node) if prompt_node is not None else node.body
    toolkits = tuple(dict.fromkeys(t for t in _SPLIT.split(props.get("TOOLKITS", "")) if t))
    return AgentDef(
        id=props.get("ID") or where.stem,
        model=props.get("MODEL") or None,
        toolkits=toolkits,
        reach=tuple(dict.fromkeys(t for t in _SPLIT.split(props.get("REACH", "")) if t)),
        tagline=props.get("TAGLINE", ""),
        system_prompt=prompt.strip(),
        path=Path(path) if path else None,
        title=node.heading,
        tool_choice=tuple(t for t in _SPLIT.split(props.get("TOOL_CHOICE", "")) if t),
    )


def tool_choice_at(agent: AgentDef, done_steps: int) -> str | None:
    """The tool choice for the step after ``done_steps`` steps: ``:TOOL_CHOICE:``'s entry
    for that step, else its last entry, else ``None`` (the endpoint's default). A small
    model that never calls a tool on its own can be made to: ``b64__b64 auto`` names the
    tool of the first step, then lets the model choose."""
    if not agent.tool_choice:
        return None
    return agent.tool_choice[min(done_steps, len(agent.tool_choice) - 1)]


def load(path: Path | str) -> AgentDef:
    p = Path(path)
    return parse(read_text(p), p)


#: How a reader with a shell reads a skill (``wbx agent prompt`` for agents outside wbcore).
READ_SKILL_SHELL = "`wbx toolkit show <toolkit> <skill>`"
#: How an agent of the agent loop reads one: it has no shell, only its tools.
READ_SKILL_TOOL = 'the `wb` tool (`{"op": "skill", "toolkit": <toolkit>, "skill": <skill>}`)'


def toolkit_index(discovery: Any, names: tuple[str, ...] | list[str],
                  unavailable: Callable[[Any], str | None] | None = None, *,
                  read_skill: str = READ_SKILL_SHELL) -> str:
    """One line per known, available toolkit in declared order, plus up to eight skill
    names. ``unavailable(toolkit)`` says why a toolkit may not be used (then it is left
    out: a tampered toolkit's text never reaches a prompt). ``read_skill`` tells the reader
    how it reads a skill with what it has (a shell, or the agent loop's tools)."""
    lines: list[str] = []
    for name in names:
        try:
            tk = discovery.get(name)
        except Exception:  # an unknown or broken toolkit is dropped, never a crash
            continue
        if unavailable is not None and unavailable(tk):
            continue
        skills = [s.slug for s in tk.skills][:MAX_INDEX_SKILLS]
        line = f"- {tk.id}: {tk.manifest.tagline}"
        if skills:
            more = len(tk.skills) - len(skills)
            line += f" (skills: {', '.join(skills)}{f', +{more} more' if more > 0 else ''})"
        lines.append(line)
    if not lines:
        return ""
    head = (
        "## Toolkits\n"
        f"You may use these toolkits. Before using one, read its skill with {read_skill} "
        "(start with `overview`)."
    )
    return head + "\n" + "\n".join(lines)


def prompt(agent: AgentDef, discovery: Any, unavailable: Callable[[Any], str | None] | None = None, *,
           read_skill: str = READ_SKILL_SHELL) -> str:
    """The system prompt with the toolkit index injected after it."""
    index = toolkit_index(discovery, agent.toolkits, unavailable, read_skill=read_skill)
    if not index:
        return agent.system_prompt
    return f"{agent.system_prompt}\n\n{index}" if agent.system_prompt else index
