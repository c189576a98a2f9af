"""Substring search across toolkits and skills (``wbx toolkit search``)."""

from __future__ import annotations

from dataclasses import dataclass

from wbcore.discovery import Discovery
from wbcore.errors import WbError


@dataclass(frozen=True, slots=True)
class Hit:
    toolkit: str
    skill: str | None
    field: str
    snippet: str

    def as_dict(self) -> dict[str, str | None]:
        return {"toolkit": self.toolkit, "skill": self.skill, "field": self.field, "snippet": self.snippet}


def _snippet(text: str, at: int, width: int = 60) -> str:
    start = max(0, at - width // 2)
    return " ".join(text[start : start + width].split())


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
                hits.append(Hit(tk.id, None, field_name, _snippet(value, at)))
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
                hits.append(Hit(tk.id, skill.slug, "text", _snippet(text, at)))
    return hits


def problems(found: Discovery) -> list[WbError]:
    """Skill files the search could not read (refused by containment): ``file: reason`` each."""
    return [p for tk in found.toolkits.values() for p in tk.skill_problems]
