"""The toolkit index injected into an agent's prompt (seed 004 "Agent definitions").

Progressive disclosure, tier 1: one line per declared toolkit (in declared order,
unknown names dropped) with up to 8 skill names; the agent reads a skill body on
demand with ``wbx toolkit show <id> <skill>``. The runtime never inlines the manual.
"""

from __future__ import annotations

from collections.abc import Iterable

from wbcore.discovery import Discovery

MAX_SKILLS = 8


def resolve(found: Discovery, names: Iterable[str]) -> list[str]:
    """Declared toolkit names that exist, in declared order, without repeats."""
    out: list[str] = []
    for name in names:
        if name in found.toolkits and name not in out:
            out.append(name)
    return out


def injection_text(found: Discovery, names: Iterable[str]) -> str:
    ids = resolve(found, names)
    if not ids:
        return ""
    lines = ["Toolkits (read a skill with: wbx toolkit show <toolkit> <skill>):"]
    for ident in ids:
        tk = found.toolkits[ident]
        slugs = [s.slug for s in tk.skills]
        shown = ", ".join(slugs[:MAX_SKILLS] + (["…"] if len(slugs) > MAX_SKILLS else []))
        tail = f" — skills: {shown}" if slugs else ""
        lines.append(f"- {ident}: {tk.manifest.tagline}{tail}")
    return "\n".join(lines)
