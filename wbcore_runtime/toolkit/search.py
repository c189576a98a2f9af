"""Substring search across toolkits and skills (``wbx toolkit search``)."""

from __future__ import annotations

from dataclasses import dataclass

from wbcore_runtime.toolkit.discovery import Discovery
from wbcore_runtime.contract.errors import WbError


@dataclass(frozen=True, slots=True)
class Hit:
    toolkit: str
    skill: str | None
    field: str
    snippet: str

    def as_dict(self) -> dict[str, str | None]:
        return {"toolkit": self.toolkit, "skill": self.skill, "field": self.field, "snippet": self.snippet}


def _snippet(text: str, at: int, width: int = 60, length: int = 0) -> str:
    """About ``width`` characters around the match at ``at`` (``length`` long), cut on word
    boundaries (a word longer than the window is cut), with … where text was left out."""
    start = max(0, at - width // 2)
    end = min(len(text), max(start + width, at + length))
    if start > 0 and not text[start - 1].isspace():
        space = min((i for i in (text.find(c, start, at) for c in " \t\n") if i >= 0), default=-1)
        start = space + 1 if space >= 0 else start
    if end < len(text) and not text[end].isspace():
        space = max(text.rfind(c, at + length, end) for c in " \t\n")
        end = space if space >= 0 else end
    body = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")


def search(found: Discovery, query: str) -> list[Hit]:
    q = query.casefold()
    if not q:
        return []
    hits: list[Hit] = []
    for tk in found.toolkits.values():
        m = tk.manifest
        for field_name, value in (("id", m.id), ("title", m.title), ("tagline", m.tagline)):
            at = value.casefold().find(q)
            if at >= 0:
                hits.append(Hit(tk.id, None, field_name, _snippet(value, at, length=len(q))))
                break
        for skill in tk.skills:
            if q in skill.slug.casefold():
                hits.append(Hit(tk.id, skill.slug, "skill", skill.summary or skill.title))
                continue
            try:
                text = tk.skill_text(skill.slug)
            except WbError:  # changed since it was listed; the next listing names the problem
                continue
            at = text.casefold().find(q)
            if at >= 0:
                hits.append(Hit(tk.id, skill.slug, "text", _snippet(text, at, length=len(q))))
    return hits


def problems(found: Discovery) -> list[WbError]:
    """Skill files the search could not read (refused by containment): ``file: reason`` each."""
    return [p for tk in found.toolkits.values() for p in tk.skill_problems]
