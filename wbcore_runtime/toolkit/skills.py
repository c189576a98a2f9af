"""Skills: the recipes an agent reads on demand, and the rules that keep slugs safe.

A slug matches ``^[A-Za-z0-9._-]+$`` and is not ``.`` or ``..``. The ``skills/`` folder
must resolve inside the toolkit, and each skill inside ``skills/``, with every symlink on
the way checked by :mod:`wbcore_runtime.guard.paths`. A skill that is refused (a link out, a hard link,
a FIFO, over the cap) is a *problem* (``file: reason``) that every surface shows, never a
skill that is listed or served.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, unknown_name
from wbcore_runtime.toolkit.manifest import normalized

SLUG_RE = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_SKILL_BYTES = 1 << 20
SKILL_SUFFIX = ".org"
SKILLS_DIR = "skills"
SKILLS_ROOT = "the skills folder"
#: How much of each skill the index reads for its title and summary.
HEAD_BYTES = 8192


@dataclass(frozen=True, slots=True)
class Skill:
    slug: str
    title: str
    summary: str
    path: Path

    def as_dict(self) -> dict[str, str]:
        return {"slug": self.slug, "title": self.title, "summary": self.summary}


@dataclass(frozen=True, slots=True)
class Index:
    """The skills of one toolkit (``overview`` first) and the files that were refused."""

    skills: tuple[Skill, ...] = ()
    problems: tuple[paths.Refused, ...] = ()


def check_slug(slug: str) -> str:
    """Return the bare slug (``.org`` stripped) or raise ``InvalidArgs`` saying why."""
    if slug.endswith(SKILL_SUFFIX):
        slug = slug[: -len(SKILL_SUFFIX)]
    if not slug or not SLUG_RE.match(slug):
        raise InvalidArgs(f"skill slug {slug!r} must match {SLUG_RE.pattern}")
    if slug == "." or ".." in slug:
        raise InvalidArgs(f"skill slug {slug!r} may not contain '..'")
    return slug


def skills_root(toolkit: Path | paths.Root) -> paths.Root | None:
    """``skills/`` of a toolkit folder (a path, or a :class:`~wbcore_runtime.guard.paths.Root`
    already checked) as a containment root; ``None`` when there is none,
    :class:`~wbcore_runtime.guard.paths.Refused` when it is not a folder inside the toolkit."""
    folder = toolkit if isinstance(toolkit, paths.Root) else paths.Root.at(toolkit)
    try:
        return folder.folder(SKILLS_DIR, SKILLS_ROOT)
    except NotFound:
        return None


def skill_path(toolkit_dir: Path | paths.Root, slug: str) -> Path:
    """The checked, symlink-free path of one skill file, or an error naming the problem."""
    slug = check_slug(slug)
    root = skills_root(toolkit_dir)
    try:
        if root is None:
            raise NotFound(SKILLS_DIR)
        return root.inside(f"{slug}{SKILL_SUFFIX}")
    except NotFound:
        raise NotFound(unknown_name("skill", slug, [s.slug for s in list_skills(toolkit_dir)])) from None


def read_skill_bytes(toolkit_dir: Path | paths.Root, slug: str) -> tuple[bytes, str]:
    """The bytes of one skill, read once through containment, and the symlink-free path of
    the file they were read from, relative to the toolkit folder (a signed form's name)."""
    slug = check_slug(slug)
    root = skills_root(toolkit_dir)
    try:
        if root is None:
            raise NotFound(SKILLS_DIR)
        real = root.inside(f"{slug}{SKILL_SUFFIX}")
        raw = root.read(f"{slug}{SKILL_SUFFIX}", MAX_SKILL_BYTES)
    except NotFound:
        raise NotFound(unknown_name("skill", slug, [s.slug for s in list_skills(toolkit_dir)])) from None
    top = toolkit_dir.real if isinstance(toolkit_dir, paths.Root) else os.path.realpath(toolkit_dir)
    return raw, Path(os.path.relpath(real, top)).as_posix()


def skill_text(raw: bytes, toolkit_dir: Path | paths.Root, slug: str) -> str:
    """The text of a skill's bytes (from :func:`read_skill_bytes`)."""
    # The parser's lines: a skill cut differently by another reader (a lone CR, U+2028 ...)
    # is refused with file:line, as a manifest is.
    top = toolkit_dir.shown if isinstance(toolkit_dir, paths.Root) else toolkit_dir
    where = Path(top) / SKILLS_DIR / f"{check_slug(slug)}{SKILL_SUFFIX}"
    return normalized(raw.decode("utf-8", errors="replace"), where, what="skill")


def read_skill(toolkit_dir: Path | paths.Root, slug: str) -> str:
    return skill_text(read_skill_bytes(toolkit_dir, slug)[0], toolkit_dir, slug)


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


def scan(toolkit_dir: Path | paths.Root) -> Index:
    """Every skill in ``skills/`` that may be read, and a problem for each one that may not."""
    try:
        root = skills_root(toolkit_dir)
    except paths.Refused as exc:
        return Index(problems=(exc,))
    if root is None:
        return Index()
    try:
        names = sorted(e.name for e in os.scandir(root.real))
    except OSError:
        return Index()
    found: list[Skill] = []
    problems: list[paths.Refused] = []
    for name in names:
        if not name.endswith(SKILL_SUFFIX):
            continue
        slug = name[: -len(SKILL_SUFFIX)]
        if not SLUG_RE.match(slug) or slug in (".", ".."):
            continue
        try:
            with root.open(name) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_SKILL_BYTES:
                    raise paths.Refused(root.shown / name,
                                        f"{size} bytes is over the {MAX_SKILL_BYTES}-byte cap")
                head = fh.read(HEAD_BYTES).decode("utf-8", errors="replace")
        except paths.Refused as exc:
            problems.append(exc)
            continue
        except (NotFound, OSError):  # removed while listing, or a link to nothing
            continue
        title, summary = _describe(head, slug)
        found.append(Skill(slug, title, summary, root.shown / name))
    found.sort(key=lambda s: (s.slug != "overview", s.slug))
    return Index(tuple(found), tuple(problems))


def list_skills(toolkit_dir: Path | paths.Root) -> list[Skill]:
    """Skills in ``skills/``, ``overview`` first; refused entries are left out (see :func:`scan`)."""
    return list(scan(toolkit_dir).skills)
