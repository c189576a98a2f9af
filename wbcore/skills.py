"""Skills: the recipes an agent reads on demand, and the rules that keep slugs safe.

A slug matches ``^[A-Za-z0-9._-]+$``, is not ``.`` or ``..``, and its file must
resolve strictly inside ``<toolkit>/skills/`` after following symlinks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from wbcore.errors import InvalidArgs, NotFound, unknown_name

SLUG_RE = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_SKILL_BYTES = 1 << 20
SKILL_SUFFIX = ".org"


@dataclass(frozen=True, slots=True)
class Skill:
    slug: str
    title: str
    summary: str
    path: Path

    def as_dict(self) -> dict[str, str]:
        return {"slug": self.slug, "title": self.title, "summary": self.summary}


def check_slug(slug: str) -> str:
    """Return the bare slug (``.org`` stripped) or raise ``InvalidArgs`` saying why."""
    if slug.endswith(SKILL_SUFFIX):
        slug = slug[: -len(SKILL_SUFFIX)]
    if not slug or not SLUG_RE.match(slug):
        raise InvalidArgs(f"skill slug {slug!r} must match {SLUG_RE.pattern}")
    if slug == "." or ".." in slug:
        raise InvalidArgs(f"skill slug {slug!r} may not contain '..'")
    return slug


def _contained(path: Path, skills_dir: Path) -> bool:
    try:
        real = Path(os.path.realpath(path))
        base = Path(os.path.realpath(skills_dir))
    except (OSError, ValueError):
        return False
    return real.parent == base or base in real.parents


def skill_path(toolkit_dir: Path, slug: str) -> Path:
    """The safe path of one skill file, or an error naming the problem."""
    slug = check_slug(slug)
    skills_dir = toolkit_dir / "skills"
    path = skills_dir / f"{slug}{SKILL_SUFFIX}"
    if path.is_symlink() or path.exists():
        if not _contained(path, skills_dir):
            raise InvalidArgs(f"skill {slug!r} resolves outside {skills_dir}")
        if not path.is_file():
            raise InvalidArgs(f"skill {slug!r} is not a regular file")
        return path
    raise NotFound(unknown_name("skill", slug, [s.slug for s in list_skills(toolkit_dir)]))


def read_skill(toolkit_dir: Path, slug: str) -> str:
    path = skill_path(toolkit_dir, slug)
    with path.open("rb") as fh:
        raw = fh.read(MAX_SKILL_BYTES + 1)
    if len(raw) > MAX_SKILL_BYTES:
        raise InvalidArgs(f"skill {slug!r} is over the {MAX_SKILL_BYTES}-byte cap")
    from wbcore.manifest import normalized

    # The parser's lines: a skill cut differently by another reader (a lone CR, U+2028 ...)
    # is refused with file:line, as a manifest is.
    return normalized(raw.decode("utf-8", errors="replace"), path, what="skill")


def _describe(text: str, slug: str) -> tuple[str, str]:
    title = slug
    summary = ""
    for line in text.splitlines()[:60]:
        s = line.strip()
        low = s.lower()
        if low.startswith("#+title:"):
            title = s[8:].strip() or slug
        elif low.startswith("#+description:") and not summary:
            summary = s[14:].strip()
        elif s and not s.startswith(("#", "*", ":")) and not summary:
            summary = s
    return title, summary[:200]


def list_skills(toolkit_dir: Path) -> list[Skill]:
    """Skills in ``skills/``, ``overview`` first; unsafe or escaping entries are skipped."""
    skills_dir = toolkit_dir / "skills"
    if not skills_dir.is_dir():
        return []
    found: list[Skill] = []
    try:
        entries = sorted(os.scandir(skills_dir), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if not entry.name.endswith(SKILL_SUFFIX):
            continue
        slug = entry.name[: -len(SKILL_SUFFIX)]
        if not SLUG_RE.match(slug) or slug in (".", ".."):
            continue
        path = Path(entry.path)
        if not _contained(path, skills_dir) or not path.is_file():
            continue
        try:
            with path.open("rb") as fh:
                head = fh.read(8192).decode("utf-8", errors="replace")
        except OSError:
            continue
        title, summary = _describe(head, slug)
        found.append(Skill(slug, title, summary, path))
    found.sort(key=lambda s: (s.slug != "overview", s.slug))
    return found
