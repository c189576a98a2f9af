"""``wbx toolkit import``: package an Agent Skills folder, a markdown file or a folder as a toolkit.

Agent Skills (``SKILL.md`` with YAML frontmatter ``name`` / ``description``, plus
``scripts/``, ``references/``, ``assets/``) → ``manifest.org`` (discovery-only: no
``#+EXEC``) + ``skills/overview.org`` (the introduction and an index) + one skill per
section of the main document + one skill per reference document. Scripts and assets
are copied as they are; nothing runs natively, and :mod:`wbcore.native_audit` reports
each one. The toolkit is built in a staging folder and renamed into place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore import markup, unpack
from wbcore.errors import InvalidArgs, NotFound
from wbcore.manifest import NAME_RE

MAX_DOC_BYTES = 1 << 20
MAX_FILES = 5000
MAX_TOTAL_BYTES = 256 << 20
MAIN_DOCS = ("SKILL.md", "skill.md", "README.md", "readme.md", "index.md")
MD_SUFFIXES = (".md", ".markdown")
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Split ``---``-fenced YAML frontmatter (the subset SKILL.md uses) from the body."""
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines()
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return {}, text
    data: dict[str, Any] = {}
    i = 1
    while i < end:
        line = lines[i]
        m = re.match(r"^([A-Za-z_][\w-]*):\s*(.*)$", line)
        i += 1
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        block: list[str] = []
        while i < end and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
            block.append(lines[i])
            i += 1
        if value in (">", ">-", "|", "|-", ">+", "|+"):
            body = [b.strip() for b in block]
            data[key] = (" " if value.startswith(">") else "\n").join(b for b in body if b).strip()
        elif value:
            data[key] = _scalar(value)
        elif block and all(b.strip().startswith("- ") or not b.strip() for b in block):
            data[key] = [_scalar(b.strip()[2:]) for b in block if b.strip()]
        elif block:
            sub: dict[str, Any] = {}
            for b in block:
                sm = re.match(r"^\s+([A-Za-z_][\w-]*):\s*(.*)$", b)
                if sm:
                    sub[sm.group(1)] = _scalar(sm.group(2).strip())
            data[key] = sub
        else:
            data[key] = ""
    return data, "\n".join(lines[end + 1 :]).lstrip("\n")


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
    return _one_line(text).replace("\n", " ")


def _relink(org_text: str, links: dict[str, str], tid: str) -> str:
    """Links to reference documents become pointers to the skills they were turned into."""

    def swap(m: re.Match[str]) -> str:
        target = m.group(1).removeprefix("./")
        slug = links.get(target)
        if slug is None:
            return m.group(0)
        return f"{m.group(2) or slug} (skill =wbx toolkit show {tid} {slug}=)"

    return re.sub(r"\[\[([^\]\n]+)\](?:\[([^\]\n]+)\])?\]", swap, org_text)


@dataclass(frozen=True)
class Imported:
    id: str
    path: Path
    skills: tuple[str, ...]
    copied: tuple[str, ...]


def _plan(source: Path, ident: str | None) -> tuple[str, dict[str, Any], Doc, list[tuple[str, Path]], list[Path], str]:
    """(id, frontmatter, main doc, [(slug-hint, reference doc)], [files to copy], kind)."""
    if source.is_file():
        if not source.name.lower().endswith(MD_SUFFIXES):
            raise InvalidArgs(f"{source}: import takes a markdown file (.md) or a folder")
        head, body = parse_frontmatter(_read_doc(source))
        name = ident or str(head.get("name") or source.stem)
        return name, head, split_sections(body), [], [], "markdown"
    if not source.is_dir():
        raise NotFound(f"import source {source} does not exist")
    main = next((source / n for n in MAIN_DOCS if (source / n).is_file()), None)
    front: dict[str, Any] = {}
    doc = Doc(None, "")
    kind = "folder"
    if main is not None:
        front, body = parse_frontmatter(_read_doc(main))
        doc = split_sections(body)
        kind = "agent-skills" if main.name.lower() == "skill.md" else "folder"
    refs: list[tuple[str, Path]] = []
    copies: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if main is not None and p == main or name.startswith("."):
                continue
            rel = p.relative_to(source)
            if name.lower().endswith(MD_SUFFIXES) and not p.is_symlink() and rel.parts[0] not in ("scripts", "assets"):
                refs.append((rel.with_suffix("").as_posix(), p))
            else:
                copies.append(rel)
            if len(refs) + len(copies) > MAX_FILES:
                raise InvalidArgs(f"{source}: more than {MAX_FILES} files to import")
    name = ident or str(front.get("name") or source.name)
    return name, front, doc, refs, copies, kind


def _manifest(ident: str, title: str, tagline: str, front: dict[str, Any], kind: str, source: Path) -> str:
    kw = {
        "TITLE": title,
        "TOOLKIT": ident,
        "VERSION": str((front.get("metadata") or {}).get("version") or front.get("version") or "0.1.0"),
        "STATUS": "experimental",
        "TAGLINE": tagline,
    }
    if not re.match(r"^\d+\.\d+\.\d+", kw["VERSION"]):
        kw["VERSION"] = "0.1.0"
    if front.get("license"):
        kw["LICENSE"] = _org_keyword_value(str(front["license"]))
    kw["IMPORTED_FROM"] = f"{kind}: {source.name}"
    lines = [f"#+{k}: {_org_keyword_value(v)}" for k, v in kw.items()]
    lines += ["", f"* {title} :toolkit:", "  :PROPERTIES:", f"  :ID: {ident}", "  :STATUS: experimental", "  :END:", "",
              tagline, "", "Imported as a discovery-only toolkit (no #+EXEC): read the skills with",
              f"=wbx toolkit show {ident} <skill>=. Run =wbx toolkit audit= on this folder to see what",
              "in it assumes native execution."]
    tools = front.get("allowed-tools")
    if tools:
        listed = " ".join(tools) if isinstance(tools, list) else str(tools)
        lines += ["", f"The original skill asked for these agent tools: ={_one_line(listed)}=."]
    return "\n".join(lines) + "\n"


def import_skill(source: Path, out_root: Path, *, ident: str | None = None, force: bool = False) -> Imported:
    """Write ``out_root/<id>/`` from ``source``; returns what was written."""
    source = source.expanduser()
    name, front, doc, refs, copies, kind = _plan(source, ident)
    tid = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "imported"
    if ident is not None and not NAME_RE.match(ident):
        raise InvalidArgs(f"--as {ident!r} must match {NAME_RE.pattern}")
    title = _one_line(str(front.get("title") or doc.title or name.replace("-", " ").title()), 120)
    description = str(front.get("description") or _first_sentence(doc.intro) or
                      (doc.sections and _first_sentence(doc.sections[0].body)) or f"Skills imported from {source.name}.")
    tagline = _one_line(description, 240)
    target = out_root / tid
    if (target.exists() or target.is_symlink()) and not force:
        raise InvalidArgs(f"{target} exists (use --force to replace it)")
    out_root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".import-{tid}-", dir=out_root))
    try:
        (stage / "skills").mkdir()
        taken: set[str] = set()
        index: list[tuple[str, str, str]] = []
        ref_slugs = {hint: slugify(Path(hint).name, taken) for hint, _ in refs}
        links = {f"{hint}.md": slug for hint, slug in ref_slugs.items()}
        for sec in doc.sections:
            slug = slugify(sec.title, taken)
            text = f"#+TITLE: {_one_line(sec.title, 120)}\n\n" + markup.md_to_org(sec.body)
            (stage / "skills" / f"{slug}.org").write_text(_relink(text, links, tid), encoding="utf-8")
            index.append((slug, sec.title, _first_sentence(sec.body)))
        for hint, path in refs:
            rfront, rbody = parse_frontmatter(_read_doc(path))
            rdoc = split_sections(rbody)
            rtitle = str(rfront.get("title") or rdoc.title or Path(hint).name.replace("-", " ").replace("_", " "))
            slug = ref_slugs[hint]
            body = rbody if rdoc.title is None else "\n".join(ln for ln in rbody.splitlines() if ln.strip() != f"# {rdoc.title}")
            shift = -1 if rdoc.title is not None else 0
            text = f"#+TITLE: {_one_line(rtitle, 120)}\n#+SOURCE: {hint}.md\n\n" + markup.md_to_org(body, shift=shift)
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
        (stage / "skills" / "overview.org").write_text(_relink("\n".join(overview).rstrip("\n") + "\n", links, tid), encoding="utf-8")
        copied: list[str] = []
        total = 0
        if source.is_dir():
            for rel in copies:
                src = source / rel
                dest = stage / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if src.is_symlink():
                    target_text = os.readlink(src)
                    unpack._check_link(rel.as_posix(), target_text, str(source))  # refuse links leaving the skill
                    os.symlink(target_text, dest)
                elif src.is_file():
                    total += src.stat().st_size
                    if total > MAX_TOTAL_BYTES:
                        raise InvalidArgs(f"{source}: more than {MAX_TOTAL_BYTES} bytes to copy")
                    shutil.copy2(src, dest)
                else:
                    continue
                copied.append(rel.as_posix())
        (stage / "manifest.org").write_text(_manifest(tid, title, tagline, front, kind, source), encoding="utf-8")
        if target.exists() or target.is_symlink():
            trash = Path(tempfile.mkdtemp(prefix=f".old-{tid}-", dir=out_root))
            os.rename(target, trash / tid)
            os.rename(stage, target)
            unpack.remove_tree(trash)
        else:
            os.rename(stage, target)
        return Imported(tid, target, tuple(s for s, _, _ in index), tuple(copied))
    finally:
        if stage.exists():
            unpack.remove_tree(stage)


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
    found = sorted({p.parent for p in tree.rglob("SKILL.md") if ".git" not in p.parts})
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
                  sha256: str | None = None) -> Imported:
    """Import from a local path, or fetch ``git+…`` / an archive (as ``wbx toolkit install`` does) first."""
    if not text.startswith(("git+", "https://", "http://")):
        return import_skill(Path(text), out_root, ident=ident, force=force)
    from wbcore import install

    source = install.parse_source(text, sha256)
    with tempfile.TemporaryDirectory(prefix="wb-import-") as tmp:
        tree, _commit, _digest = install.fetch(source, Path(tmp))
        root = _skill_root(tree)
        name = ident
        if name is None and root == tree:
            front, _ = parse_frontmatter(_read_doc(root / "SKILL.md")) if (root / "SKILL.md").is_file() else ({}, "")
            name = None if front.get("name") else _remote_name(text)
        return import_skill(root, out_root, ident=name, force=force)
