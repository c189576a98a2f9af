"""``wbx toolkit import``: package an Agent Skills folder, a markdown file or a folder as a toolkit.

Agent Skills (``SKILL.md`` with YAML frontmatter, plus ``scripts/``, ``references/``,
``assets/``): one SKILL.md ↔ one toolkit. The frontmatter is checked against the
specification (``file:line`` for what it refuses) and kept as manifest keywords; the body,
headings and all, becomes ``skills/overview.org``; every other markdown document becomes a
skill that remembers its path (``#+SOURCE``); every other file is copied as data. This is
exactly what :mod:`wbcore_agent_skills.export` writes back, so export → import → export is byte-identical.

A plain markdown file or folder: ``skills/overview.org`` (the introduction and an index) +
one skill per section + one per document. Nothing imported runs natively, and
:mod:`wbcore_agent_skills.native_audit` reports each script. The toolkit is built in a staging folder
and renamed into place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_agent_skills import markup
from wbcore_runtime.guard import paths, unpack
from wbcore_runtime.build import snapshot
from wbcore_runtime.contract import installs
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError
from wbcore_runtime.toolkit.manifest import NAME_RE

MAX_DOC_BYTES = 1 << 20
MAX_FILES = 5000
MAX_TOTAL_BYTES = 256 << 20
#: The Agent Skills specification's frontmatter (https://agentskills.io/specification).
SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
#: metadata keys wbcore writes on export (regenerated, so not kept on import).
GENERATED_METADATA = ("toolkit", "trust", "generator", "author_did")
MAIN_DOCS = ("SKILL.md", "skill.md", "README.md", "readme.md", "index.md")
MD_SUFFIXES = (".md", ".markdown")
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Split ``---``-fenced YAML frontmatter (the subset SKILL.md uses) from the body."""
    data, body, _lines = read_frontmatter(text)
    return data, body


def read_frontmatter(text: str) -> tuple[dict[str, Any], str, dict[str, int]]:
    """:func:`parse_frontmatter`, plus the 1-based line of each key (for ``file:line`` errors)."""
    if not text.startswith("---"):
        return {}, text, {}
    lines = text.splitlines()
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return {}, text, {}
    data: dict[str, Any] = {}
    where: dict[str, int] = {}
    i = 1
    while i < end:
        line = lines[i]
        m = re.match(r"^([A-Za-z_][\w-]*):\s*(.*)$", line)
        i += 1
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        where[key] = i
        block: list[str] = []
        while i < end and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
            block.append(lines[i])
            i += 1
        if value in (">", ">-", "|", "|-", ">+", "|+"):
            body = [b.strip() for b in block]
            data[key] = (" " if value.startswith(">") else "\n").join(b for b in body if b).strip()
        elif value:
            # A plain or quoted scalar may go on over indented lines: YAML folds them with spaces.
            more = [b.strip() for b in block if b.strip()]
            data[key] = _scalar(" ".join([value, *more]) if more else value)
        elif block and all(b.strip().startswith("- ") or not b.strip() for b in block):
            data[key] = [_scalar(b.strip()[2:]) for b in block if b.strip()]
        elif block:
            sub: dict[str, Any] = {}
            for b in block:
                sm = re.match(r"^\s+([A-Za-z_][\w.-]*):\s*(.*)$", b)
                if sm:
                    sub[sm.group(1)] = _scalar(sm.group(2).strip())
            data[key] = sub
        else:
            data[key] = ""
    return data, "\n".join(lines[end + 1 :]).lstrip("\n"), where


def _scalar(value: str) -> Any:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == '"':
            try:
                return json.loads(value)
            except ValueError:
                return inner
        return inner.replace("''", "'")
    if value.startswith("[") and value.endswith("]"):
        return [_scalar(v.strip()) for v in value[1:-1].split(",") if v.strip()]
    return value


def slugify(text: str, taken: set[str] | None = None, *, limit: int = 48) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "section"
    slug = base
    n = 2
    while taken is not None and (slug in taken or slug == "overview"):
        slug = f"{base}-{n}"
        n += 1
    if taken is not None:
        taken.add(slug)
    return slug


@dataclass
class Section:
    title: str
    body: str  # markdown, headings relative to the section


@dataclass
class Doc:
    title: str | None
    intro: str
    sections: list[Section] = field(default_factory=list)


def split_sections(markdown: str) -> Doc:
    """A leading lone H1 is the title; the next level down splits the body into sections."""
    lines = markdown.splitlines()
    headings: list[tuple[int, int, str]] = []
    fence = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        m = None if fence else _HEADING_RE.match(line)
        if m:
            headings.append((i, len(m.group(1)), m.group(2)))
    title = None
    if headings and sum(1 for h in headings if h[1] == 1) == 1 and headings[0][1] == 1:
        title = headings[0][2]
        start = headings[0][0]
        lines = lines[:start] + lines[start + 1 :]
        headings = [(i - 1, lvl, t) for i, lvl, t in headings[1:]]
    if not headings:
        return Doc(title, "\n".join(lines).strip())
    top = min(h[1] for h in headings)
    cuts = [h for h in headings if h[1] == top]
    intro = "\n".join(lines[: cuts[0][0]]).strip()
    sections = []
    for n, (i, _lvl, t) in enumerate(cuts):
        end = cuts[n + 1][0] if n + 1 < len(cuts) else len(lines)
        body = "\n".join(lines[i + 1 : end]).strip()
        sections.append(Section(t, _shift_headings(body, top)))
    return Doc(title, intro, sections)


def _shift_headings(body: str, top: int) -> str:
    """Make ``top+1``-level headings inside a section level 1."""
    out = []
    fence = False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else _HEADING_RE.match(line)
        out.append("#" * max(1, len(m.group(1)) - top) + " " + m.group(2) if m else line)
    return "\n".join(out)


def _read_doc(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_DOC_BYTES:
        raise InvalidArgs(f"{path} is over the {MAX_DOC_BYTES}-byte cap for a skill document")
    return path.read_text(encoding="utf-8", errors="replace")


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _first_sentence(markdown: str) -> str:
    for para in markdown.split("\n\n"):
        p = para.strip()
        if p and not p.startswith(("#", "```", "|", "-", "*", ">")):
            plain = re.sub(r"[`*_\[\]]", "", re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", p))
            m = re.match(r"(.+?[.!?])(\s|$)", " ".join(plain.split()))
            return _one_line(m.group(1) if m else plain, 200)
    return ""


def _org_keyword_value(text: str) -> str:
    return " ".join(text.split())


def check_name(name: object, where: str, dir_name: str | None) -> str:
    """The spec's ``name`` rules; ``where`` is ``file:line``. Returns the (NFKC) name."""
    fix = "use 1-64 lowercase letters, digits and single hyphens, matching the folder's name"
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgs(f"{where}: name: missing or empty; {fix}")
    name = unicodedata.normalize("NFKC", name.strip())
    problem = None
    if len(name) > NAME_MAX:
        problem = f"{len(name)} characters (at most {NAME_MAX})"
    elif name != name.lower():
        problem = f"{name!r} has uppercase letters"
    elif not all(c.isalnum() or c == "-" for c in name):
        problem = f"{name!r} has characters other than letters, digits and hyphens"
    elif name.startswith("-") or name.endswith("-"):
        problem = f"{name!r} starts or ends with a hyphen"
    elif "--" in name:
        problem = f"{name!r} has consecutive hyphens"
    elif dir_name is not None and unicodedata.normalize("NFKC", dir_name) != name:
        problem = f"{name!r} does not match its folder {dir_name!r}"
        fix = f"rename the folder to {name} (or the name to {dir_name})"
    if problem:
        raise InvalidArgs(f"{where}: name: {problem}; {fix}")
    return name


def check_skill_front(front: dict[str, Any], lines: dict[str, int], path: Path, dir_name: str | None) -> None:
    """Refuse, with ``file:line``, what the Agent Skills specification refuses in a SKILL.md."""
    def at(key: str) -> str:
        return f"{path}:{lines.get(key, 1)}"

    if not front:
        raise InvalidArgs(
            f"{path}:1: no YAML frontmatter; a SKILL.md starts with ---, name: and description:"
        )
    check_name(front.get("name"), at("name"), dir_name)
    desc = front.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise InvalidArgs(
            f"{at('description')}: description: missing or empty; say what the skill does and when to use it"
        )
    if len(desc) > DESCRIPTION_MAX:
        raise InvalidArgs(
            f"{at('description')}: description: {len(desc)} characters (at most {DESCRIPTION_MAX}); "
            "shorten it and move the detail into the body"
        )
    compat = front.get("compatibility")
    if compat is not None and (not isinstance(compat, str) or not compat.strip()):
        raise InvalidArgs(
            f"{at('compatibility')}: compatibility: empty; say what the skill needs, or remove the field"
        )
    if isinstance(compat, str) and len(compat) > COMPATIBILITY_MAX:
        raise InvalidArgs(
            f"{at('compatibility')}: compatibility: {len(compat)} characters (at most {COMPATIBILITY_MAX}); "
            "shorten it"
        )
    meta = front.get("metadata")
    if meta is not None and meta != "" and not isinstance(meta, dict):
        raise InvalidArgs(f"{at('metadata')}: metadata: must be a mapping of keys to strings")
    tools = front.get("allowed-tools")
    if tools is not None and not isinstance(tools, (str, list)):
        raise InvalidArgs(f"{at('allowed-tools')}: allowed-tools: must be a space-separated string or a list")


def title_and_body(markdown: str) -> tuple[str | None, str, int]:
    """(lone H1 before any other heading, the rest, the shift that makes the top heading level 1).

    Export writes ``# title`` and the overview's headings one level down; this undoes exactly that."""
    doc_lines = markdown.splitlines()
    heads: list[tuple[int, int]] = []
    fence = False
    for i, line in enumerate(doc_lines):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        m = None if fence else _HEADING_RE.match(line)
        if m:
            heads.append((i, len(m.group(1))))
    title = None
    if heads and heads[0][1] == 1 and sum(1 for h in heads if h[1] == 1) == 1:
        m = _HEADING_RE.match(doc_lines[heads[0][0]])
        title = m.group(2) if m else None
        del doc_lines[heads[0][0]]
        heads = heads[1:]
    top = min((lvl for _, lvl in heads), default=1)
    return title, "\n".join(doc_lines).strip("\n"), -(top - 1)


def _relink(org_text: str, links: dict[str, str], tid: str) -> str:
    """Links to reference documents become pointers to the skills they were turned into."""

    def swap(m: re.Match[str]) -> str:
        target = m.group(1).removeprefix("./")
        slug = links.get(target)
        if slug is None:
            return m.group(0)
        return f"{m.group(2) or slug} (skill =wbx toolkit show {tid} {slug}=)"

    return re.sub(r"\[\[([^\]\n]+)\](?:\[([^\]\n]+)\])?\]", swap, org_text)


#: The folder of a toolkit imported from Agent Skills that keeps the package byte for byte
#: (SKILL.md and every file), so an export gives back exactly what was imported.
ORIGINAL_DIR = "agent-skill"
#: The manifest keyword holding :func:`generated_digest` of what the import generated.
GENERATED_KEY = "AGENT_SKILL_GENERATED"


def generated_digest(read: Any, manifest: bytes, skills: list[str]) -> str:
    """sha256 of what an import generated from the original package: the manifest (less its
    own ``#+AGENT_SKILL_GENERATED`` line) and ``skills/<slug>.org`` of each skill. While it
    still matches, nobody edited the toolkit since the import and the original is what export
    writes; once it differs, export renders the edited skills instead."""
    import hashlib

    h = hashlib.sha256()
    kept = b"".join(
        ln for ln in manifest.splitlines(keepends=True) if not ln.startswith(f"#+{GENERATED_KEY}:".encode())
    )
    h.update(b"manifest.org\0" + kept + b"\0")
    for slug in sorted(set(skills)):
        rel = f"skills/{slug}.org"
        h.update(rel.encode() + b"\0" + read(rel) + b"\0")
    return h.hexdigest()


def _package_paths(plan: _Plan, source: Path) -> list[Path]:
    """Every file of the package: the SKILL.md, its documents and the other files."""
    paths = [path.relative_to(source) for _, path in plan.refs] + list(plan.copies)
    if plan.main is not None:
        paths.append(plan.main.relative_to(source))
    return paths


@dataclass(frozen=True)
class Imported:
    id: str
    path: Path
    skills: tuple[str, ...]
    copied: tuple[str, ...]
    #: What the import accepted but a person should know (a SKILL.md name that differs from its folder).
    warnings: tuple[str, ...] = ()


@dataclass
class _Plan:
    name: str
    front: dict[str, Any]
    front_lines: dict[str, int]
    main: Path | None
    body: str  # the main document after its frontmatter
    refs: list[tuple[str, Path]]  # (slug hint, document)
    copies: list[Path]
    kind: str  # agent-skills, markdown, folder
    warnings: list[str] = field(default_factory=list)


def _plan(source: Path, ident: str | None, *, check_dir: bool) -> _Plan:
    if source.is_file():
        if not source.name.lower().endswith(MD_SUFFIXES):
            raise InvalidArgs(f"{source}: import takes a markdown file (.md) or a folder")
        head, body, where = read_frontmatter(_read_doc(source))
        name = ident or str(head.get("name") or source.stem)
        return _Plan(name, head, where, source, body, [], [], "markdown")
    if not source.is_dir():
        raise NotFound(f"import source {source} does not exist")
    main = next((source / n for n in MAIN_DOCS if (source / n).is_file()), None)
    front: dict[str, Any] = {}
    where = {}  # typed where the markdown-file branch binds it
    body = ""
    kind = "folder"
    warning = ""
    if main is not None:
        front, body, where = read_frontmatter(_read_doc(main))
        if main.name.lower() == "skill.md":
            kind = "agent-skills"
            dir_name = source.resolve().name if check_dir else None
            if ident is not None and dir_name is not None and isinstance(front.get("name"), str) \
                    and front["name"].strip() != dir_name:
                # --as names the toolkit: the folder's name decides nothing, so say it and go on.
                check_skill_front(front, where, main, None)
                warning = (
                    f"{main}:{where.get('name', 1)}: name: {front['name'].strip()!r} does not match its "
                    f"folder {dir_name!r} (the specification wants them equal); imported as {ident} (--as)"
                )
            else:
                check_skill_front(front, where, main, dir_name)
                warning = ""
    refs: list[tuple[str, Path]] = []
    copies: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if main is not None and p == main or name.startswith("."):
                continue
            rel = p.relative_to(source)
            if (
                name.lower().endswith(MD_SUFFIXES)
                and not p.is_symlink()
                and rel.parts[0] not in ("scripts", "assets")
            ):
                refs.append((rel.with_suffix("").as_posix(), p))
            else:
                copies.append(rel)
            if len(refs) + len(copies) > MAX_FILES:
                raise InvalidArgs(f"{source}: more than {MAX_FILES} files to import")
    name = ident or _exported_id(front) or str(front.get("name") or source.name)
    plan = _Plan(name, front, where, main, body, refs, copies, kind)
    if kind == "agent-skills" and warning:
        plan.warnings.append(warning)
    return plan


def _exported_id(front: dict[str, Any]) -> str | None:
    """A package wbcore exported names its toolkit in ``metadata``: importing it back gives that id."""
    meta = front.get("metadata")
    if isinstance(meta, dict) and meta.get("generator") == "wbcore":
        tid = str(meta.get("toolkit") or "")
        return tid if NAME_RE.match(tid) else None
    return None


def _is_semver(text: str) -> bool:
    return bool(re.match(r"^\d+\.\d+\.\d+", text))


def skill_fields(front: dict[str, Any]) -> dict[str, str]:
    """The SKILL.md fields a toolkit keeps as manifest keywords, so export writes them back.

    ``metadata`` keeps every key but those export regenerates (``toolkit``, ``trust`` …) and a
    semantic ``version`` (that is ``#+VERSION``); fields outside the specification are kept
    under ``metadata`` as strings, which is where the specification lets them live."""
    out: dict[str, str] = {}
    if front.get("license"):
        out["LICENSE"] = _org_keyword_value(str(front["license"]))
    if front.get("compatibility"):
        out["COMPATIBILITY"] = _org_keyword_value(str(front["compatibility"]))
    tools = front.get("allowed-tools")
    if tools:
        out["ALLOWED_TOOLS"] = json.dumps(
            [str(t) for t in tools] if isinstance(tools, list) else str(tools), ensure_ascii=False
        )
    extra: dict[str, str] = {}
    meta = front.get("metadata")
    items = list(meta.items()) if isinstance(meta, dict) else []
    items += [(k, v) for k, v in front.items() if k not in SPEC_FIELDS and k != "title"]
    for key, value in items:
        text = (
            " ".join(map(str, value))
            if isinstance(value, list)
            else json.dumps(value)
            if isinstance(value, dict)
            else str(value)
        )
        if key in GENERATED_METADATA or (key == "version" and _is_semver(text)) or key in extra:
            continue
        extra[key] = text
    if extra:
        out["SKILL_METADATA"] = json.dumps(extra, ensure_ascii=False)
    return out


def _version(front: dict[str, Any]) -> str:
    meta = front.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    version = str(meta.get("version") or front.get("version") or "")
    return version if _is_semver(version) else "0.1.0"


def _manifest(ident: str, title: str, tagline: str, front: dict[str, Any], kind: str, source: Path,
              documents: list[tuple[str, str]]) -> str:
    kw = {
        "TITLE": title, "TOOLKIT": ident, "VERSION": _version(front), "STATUS": "experimental",
        "TAGLINE": tagline,
    }
    if kind == "agent-skills":
        kw.update(skill_fields(front))
    elif front.get("license"):
        kw["LICENSE"] = str(front["license"])
    kw["IMPORTED_FROM"] = f"{kind}: {source.name}"
    lines = [f"#+{k}: {_org_keyword_value(v)}" for k, v in kw.items()]
    lines += [
        "", f"* {title} :toolkit:", "  :PROPERTIES:", f"  :ID: {ident}", "  :STATUS: experimental", "  :END:",
        "", tagline, "",
        "Imported as a discovery-only toolkit (no #+EXEC): read the skills with",
        f"=wbx toolkit show {ident} <skill>=. Run =wbx toolkit audit= on this folder to see what",
        "in it assumes native execution.",
    ]
    if documents:
        lines += [
            "",
            "The skill's documents, each a skill of this toolkit (links in the skills name these files):",
        ]
        lines += [f"- {slug} :: {rel}" for slug, rel in documents]
    tools = front.get("allowed-tools")
    if tools:
        listed = " ".join(tools) if isinstance(tools, list) else str(tools)
        lines += ["", f"The original skill asked for these agent tools: ={_one_line(listed)}=."]
    return "\n".join(lines) + "\n"


def _doc_skill(title: str, markdown: str, shift: int, source_rel: str | None = None) -> str:
    head = f"#+TITLE: {_one_line(title, 120)}\n" + (f"#+SOURCE: {source_rel}\n" if source_rel else "")
    return head + "\n" + (markup.md_to_org(markdown, shift=shift) if markdown.strip() else "")


def _write_agent_skill(stage: Path, plan: _Plan, title: str, tagline: str, rest: str, shift: int,
                       ) -> tuple[list[str], list[tuple[str, str]]]:
    """One SKILL.md ↔ one toolkit: the body (headings and all) is the overview skill; every
    other markdown document is a skill that remembers its path (``#+SOURCE``); links stay links."""
    taken: set[str] = set()
    made: list[str] = []
    documents: list[tuple[str, str]] = []
    overview = f"#+TITLE: {_one_line(title, 120)}\n#+DESCRIPTION: {tagline}\n\n"
    (stage / "skills" / "overview.org").write_text(
        overview + (markup.md_to_org(rest, shift=shift) if rest.strip() else ""), encoding="utf-8"
    )
    for hint, path in plan.refs:
        rfront, rbody = parse_frontmatter(_read_doc(path))
        rtitle, rrest, rshift = title_and_body(rbody)
        rtitle = str(rfront.get("title") or rtitle or Path(hint).name.replace("-", " ").replace("_", " "))
        slug = slugify(Path(hint).name, taken)
        rel = path.relative_to(plan.main.parent if plan.main else path.parent).as_posix()
        (stage / "skills" / f"{slug}.org").write_text(
            _doc_skill(rtitle, rrest, rshift, rel), encoding="utf-8"
        )
        made.append(slug)
        documents.append((slug, rel))
    return made, documents


def import_skill(source: Path, out_root: Path, *, ident: str | None = None, force: bool = False,
                 check_dir: bool = True) -> Imported:
    """Write ``out_root/<id>/`` from ``source``; returns what was written.

    A folder is read once, into a private copy (:func:`wbcore_runtime.build.snapshot.take`:
    no hard links, no link leading out of it, capped as it reads, hidden names left out as
    the import leaves them out), and everything after that reads the copy: a file changed or
    swapped for a link while the import runs is never what lands.

    ``check_dir``: a SKILL.md's ``name`` must match its folder (the specification's rule); off
    only for a fetched tree whose root folder name is not the author's."""
    source = source.expanduser()
    if not source.is_dir():
        return _import(source, out_root, ident=ident, force=force, check_dir=check_dir)
    with tempfile.TemporaryDirectory(prefix="wb-import-") as tmp:
        # named as the folder is: the SKILL.md name check and the manifest read the copy's name
        copy = Path(tmp) / (source.resolve().name or "skill")
        snapshot.take(source, copy, label=f"the skill folder {source}", skip_hidden=True,
                      max_files=MAX_FILES, max_bytes=MAX_TOTAL_BYTES)
        try:
            return _import(copy, out_root, ident=ident, force=force, check_dir=check_dir)
        except WbError as exc:
            raise snapshot.shown(exc, copy, source) from None
        finally:
            snapshot.discard(copy)


def _import(source: Path, out_root: Path, *, ident: str | None, force: bool, check_dir: bool) -> Imported:
    plan = _plan(source, ident, check_dir=check_dir)
    name, front, kind = plan.name, plan.front, plan.kind
    tid = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "imported"
    if ident is not None and not NAME_RE.match(ident):
        raise InvalidArgs(f"--as {ident!r} must match {NAME_RE.pattern}")
    rest, shift = "", 0
    if kind == "agent-skills":
        doc_title, rest, shift = title_and_body(plan.body)
        doc = Doc(doc_title, rest)
    else:
        doc = split_sections(plan.body)
    title = _one_line(str(front.get("title") or doc.title or name.replace("-", " ").title()), 120)
    description = str(
        front.get("description")
        or _first_sentence(doc.intro)
        or (doc.sections and _first_sentence(doc.sections[0].body))
        or f"Skills imported from {source.name}."
    )
    tagline = _one_line(description, DESCRIPTION_MAX)
    target = out_root / tid
    if (target.exists() or target.is_symlink()) and not force:
        raise InvalidArgs(f"{target} exists (use --force to replace it)")
    out_root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".import-{tid}-", dir=out_root))
    try:
        (stage / "skills").mkdir()
        documents: list[tuple[str, str]] = []
        if kind == "agent-skills":
            made, documents = _write_agent_skill(stage, plan, title, tagline, rest, shift)
        else:
            made = _write_sections(stage, plan, doc, title, tagline, tid)
        copied = _copy_files(source, stage, plan.copies)
        manifest_text = _manifest(tid, title, tagline, front, kind, source, documents)
        if kind == "agent-skills" and source.is_dir():
            _copy_files(source, stage / ORIGINAL_DIR, sorted(_package_paths(plan, source)))
            manifest_text = manifest_text.replace(
                f"#+IMPORTED_FROM: {kind}: ", f"#+AGENT_SKILL: {ORIGINAL_DIR}\n#+IMPORTED_FROM: {kind}: ", 1)
            skills_written = ["overview", *made]
            digest = generated_digest(
                lambda rel: (stage / rel).read_bytes(), manifest_text.encode("utf-8"), skills_written
            )
            manifest_text = manifest_text.replace(
                "#+AGENT_SKILL: ", f"#+{GENERATED_KEY}: {digest}\n#+AGENT_SKILL: ", 1
            )
        (stage / "manifest.org").write_text(manifest_text, encoding="utf-8")
        if target.exists() or target.is_symlink():
            trash = Path(tempfile.mkdtemp(prefix=f".old-{tid}-", dir=out_root))
            os.rename(target, trash / tid)
            os.rename(stage, target)
            unpack.remove_tree(trash)
        else:
            os.rename(stage, target)
        return Imported(tid, target, tuple(made), tuple(copied), tuple(plan.warnings))
    finally:
        if stage.exists():
            unpack.remove_tree(stage)


def _write_sections(stage: Path, plan: _Plan, doc: Doc, title: str, tagline: str, tid: str) -> list[str]:
    """A markdown file or a plain folder: one skill per section and per document, an index in the overview."""
    taken: set[str] = set()
    index: list[tuple[str, str, str]] = []
    ref_slugs = {hint: slugify(Path(hint).name, taken) for hint, _ in plan.refs}
    links = {f"{hint}.md": slug for hint, slug in ref_slugs.items()}
    for sec in doc.sections:
        slug = slugify(sec.title, taken)
        text = f"#+TITLE: {_one_line(sec.title, 120)}\n\n" + markup.md_to_org(sec.body)
        (stage / "skills" / f"{slug}.org").write_text(_relink(text, links, tid), encoding="utf-8")
        index.append((slug, sec.title, _first_sentence(sec.body)))
    for hint, path in plan.refs:
        rfront, rbody = parse_frontmatter(_read_doc(path))
        rdoc = split_sections(rbody)
        rtitle = str(rfront.get("title") or rdoc.title or Path(hint).name.replace("-", " ").replace("_", " "))
        slug = ref_slugs[hint]
        body = (
            rbody
            if rdoc.title is None
            else "\n".join(ln for ln in rbody.splitlines() if ln.strip() != f"# {rdoc.title}")
        )
        shift = -1 if rdoc.title is not None else 0
        text = f"#+TITLE: {_one_line(rtitle, 120)}\n#+SOURCE: {hint}.md\n\n" + markup.md_to_org(
            body, shift=shift
        )
        (stage / "skills" / f"{slug}.org").write_text(_relink(text, links, tid), encoding="utf-8")
        index.append((slug, rtitle, str(rfront.get("description") or _first_sentence(rdoc.intro or rbody))))
    overview = [f"#+TITLE: {title} overview", f"#+DESCRIPTION: {tagline}", ""]
    if doc.intro:
        overview.append(markup.md_to_org(doc.intro, shift=1).rstrip("\n"))
        overview.append("")
    if index:
        overview.append("* Skills")
        overview.append(f"Read one with =wbx toolkit show {tid} <skill>=.")
        overview.append("")
        for slug, t, summary in index:
            overview.append(f"- {slug} :: {_one_line(t, 120)}" + (f" — {summary}" if summary else ""))
    (stage / "skills" / "overview.org").write_text(
        _relink("\n".join(overview).rstrip("\n") + "\n", links, tid), encoding="utf-8"
    )
    return [s for s, _, _ in index]


def _copy_files(source: Path, stage: Path, copies: list[Path]) -> list[str]:
    """Scripts, assets and every other file, copied as data (nothing here ever runs). ``source``
    is the private copy :func:`import_skill` took, whose bytes its snapshot already capped."""
    copied: list[str] = []
    if not source.is_dir():
        return copied
    for rel in copies:
        src = source / rel
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target_text = os.readlink(src)
            unpack._check_link(rel.as_posix(), target_text, str(source))  # refuse links leaving the skill
            os.symlink(target_text, dest)
        elif src.is_file():
            shutil.copyfile(src, dest)  # the private copy is read-only: the import's files are not
            os.chmod(dest, 0o755 if os.access(src, os.X_OK) else 0o644)
        else:
            continue
        copied.append(rel.as_posix())
    return copied


def _remote_name(text: str) -> str:
    tail = text.split("@")[0] if text.startswith("git+") else text.split("?")[0]
    last = tail.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".git", ".tar.gz", ".tgz", ".tar", ".zip"):
        last = last.removesuffix(suffix)
    return last or "imported"


def _skill_root(tree: Path) -> Path:
    """The folder of the skill inside a fetched tree (a lone ``SKILL.md`` folder wins)."""
    if any((tree / n).is_file() for n in MAIN_DOCS):
        return tree
    # the containment walk: a SKILL.md that is a link (or sits behind one) is not a skill here
    found = sorted(
        {
            (tree / n.rel).parent
            for n in paths.walk(tree, label="the fetched tree", skip_dirs=frozenset({".git"}))
            if n.kind == "file" and (n.rel == "SKILL.md" or n.rel.endswith("/SKILL.md"))
        }
    )
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        rels = ", ".join(str(p.relative_to(tree)) for p in found[:8])
        raise InvalidArgs(f"the source holds several skills ({rels}); import one folder at a time")
    entries = [p for p in tree.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return tree


def import_source(text: str, out_root: Path, *, ident: str | None = None, force: bool = False,
                  sha256: str | None = None, installer: installs.Client | None = None) -> Imported:
    """Import from a local path, or fetch ``git+…`` / an archive (as ``wbx toolkit install`` does,
    through ``installer``: ``contract.installs.service(runtime)``, asked only for a remote source) first."""
    if not text.startswith(("git+", "https://", "http://")):
        return import_skill(Path(text), out_root, ident=ident, force=force)
    if installer is None:
        raise NotFound(f"{text}: a remote source is fetched by the runtime's toolkit installer and none "
                       f"was given ({installs.NONE_INSTALLED})")
    install = installer()
    source = install.parse_source(text, sha256)
    with tempfile.TemporaryDirectory(prefix="wb-import-") as tmp:
        tree, _commit, _digest = install.fetch(source, Path(tmp))
        root = _skill_root(tree)
        name = ident
        if name is None and root == tree:
            front, _ = (
                parse_frontmatter(_read_doc(root / "SKILL.md")) if (root / "SKILL.md").is_file() else ({}, "")
            )
            name = None if front.get("name") else _remote_name(text)
        return import_skill(root, out_root, ident=name, force=force, check_dir=root != tree)
