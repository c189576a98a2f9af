"""``wbx toolkit export``: a toolkit as an Agent Skills package, and a well-known discovery index.

``--agent-skills DIR`` writes ``DIR/<name>/SKILL.md`` (YAML frontmatter: ``name``,
``description`` up to 1,024 characters, ``license``, ``compatibility``, ``allowed-tools``,
``metadata``; the overview skill as its body, links to the documents it does not link yet),
each other skill as a markdown document (its ``#+SOURCE`` path or ``references/<slug>.md``),
and the toolkit's ``scripts/``, ``references/`` and ``assets/`` files as they are — the
mapping :mod:`wbcore_agent_skills.skill_import` reads back, so export → import → export is
byte-identical. ``--index DIR`` also writes
``DIR/.well-known/agent-skills/index.json`` (discovery schema 0.2.0): one entry per
toolkit, ``type`` ``skill-md`` (just SKILL.md) or ``archive`` (a deterministic
``.tar.gz`` of the package), with ``digest`` = ``sha256:`` of exactly those bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from wbcore_agent_skills import markup
from wbcore_runtime.guard import unpack
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.store.archive import deterministic_targz
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_agent_skills.skill_import import GENERATED_KEY, ORIGINAL_DIR, generated_digest
from wbcore_runtime.toolkit.loaded import Toolkit
from wbcore_runtime.contract.host import RuntimeServices
from wbcore_runtime.trust import verdict as trust

INDEX_SCHEMA = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"
WELL_KNOWN = Path(".well-known") / "agent-skills"
MAX_DESCRIPTION = 1024
NAME_MAX = 64
#: The folders the specification names; a toolkit's files there are exported as they are.
PACKAGE_DIRS = ("scripts", "references", "assets")
MAX_PACKAGE_FILES = 5000
MAX_PACKAGE_BYTES = 256 << 20


def skill_name(ident: str) -> str:
    """An Agent Skills name: lowercase letters, digits and single hyphens, at most 64 chars."""
    name = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", ident.lower())).strip("-")[:NAME_MAX].strip("-")
    if not name:
        raise InvalidArgs(f"toolkit id {ident!r} has no letters or digits to name a skill")
    return name


def _yaml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def _strip_title(org_text: str) -> tuple[str | None, str]:
    m = re.search(r"^#\+TITLE:[ \t]*(.*)$", org_text, re.IGNORECASE | re.MULTILINE)
    return (m.group(1).strip() if m else None), org_text


def _fit(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip() + "…"


def _doc_path(skill_text: str, slug: str) -> str:
    """Where a skill goes in the package: the path it was imported from (``#+SOURCE``), when that
    is a safe relative markdown path, else ``references/<slug>.md``."""
    m = re.search(r"^#\+SOURCE:[ \t]*(.*?)[ \t]*$", skill_text, re.IGNORECASE | re.MULTILINE)
    rel = m.group(1) if m else ""
    p = PurePosixPath(rel)
    if (rel and not p.is_absolute() and "\\" not in rel and p.suffix.lower() in (".md", ".markdown")
            and all(part not in ("", ".", "..") and not part.startswith(".") for part in p.parts)
            and p.parts[0] != "skills" and rel.lower() != "skill.md"):
        return p.as_posix()
    return f"references/{slug}.md"


def _original_package(toolkit: Toolkit) -> dict[str, bytes] | None:
    """The package an import kept (``agent-skill/``), while what the import generated from it
    is unchanged (``skill_import.generated_digest``); else ``None`` (render the edited skills)."""
    recorded = toolkit.manifest.extra(GENERATED_KEY)
    original = toolkit.manifest.extra("AGENT_SKILL")
    if not recorded or original != ORIGINAL_DIR:
        return None
    folder = toolkit.folder()
    try:
        manifest = folder.read("manifest.org", MAX_PACKAGE_BYTES)
        now = generated_digest(lambda rel: folder.read(rel, MAX_PACKAGE_BYTES), manifest,
                                            [s.slug for s in toolkit.skills])
    except (OSError, InvalidArgs):
        return None
    if now != recorded.strip():
        return None
    return _walk_files(toolkit, original)


def _walk_files(toolkit: Toolkit, under: str) -> dict[str, bytes]:
    """Every regular file below ``under`` of the toolkit, relative to it (links not followed)."""
    folder = toolkit.folder()
    base = toolkit.dir / under
    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            if len(files) >= MAX_PACKAGE_FILES:
                raise InvalidArgs(f"{toolkit.dir}: more than {MAX_PACKAGE_FILES} files to export")
            data = folder.read(path.relative_to(toolkit.dir).as_posix(), MAX_PACKAGE_BYTES - total)
            total += len(data)
            if total >= MAX_PACKAGE_BYTES:
                raise InvalidArgs(f"{toolkit.dir}: more than {MAX_PACKAGE_BYTES} bytes to export")
            files[path.relative_to(base).as_posix()] = data
    return files


def _package_files(toolkit: Toolkit) -> dict[str, bytes]:
    """The toolkit's files that belong to the package, as bytes (data: nothing here runs).

    Always ``scripts/``, ``references/`` and ``assets/``; for a toolkit imported from Agent
    Skills, every file the import copied (all but ``manifest.org``, ``skills/`` and dot files).
    Symbolic links are not followed."""
    imported = (toolkit.manifest.extra("IMPORTED_FROM") or "").startswith("agent-skills")
    folder = toolkit.folder()
    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(toolkit.dir, followlinks=False):
        rel_dir = Path(dirpath).relative_to(toolkit.dir)
        if rel_dir == Path("."):
            dirnames[:] = [
                d for d in dirnames if d not in ("skills", ORIGINAL_DIR) and (imported or d in PACKAGE_DIRS)
            ]
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            rel = (rel_dir / name).as_posix()
            if name.startswith(".") or rel == "manifest.org" or (rel_dir == Path(".") and not imported):
                continue
            if (Path(dirpath) / name).is_symlink():
                continue
            if len(files) >= MAX_PACKAGE_FILES:
                raise InvalidArgs(f"{toolkit.dir}: more than {MAX_PACKAGE_FILES} files to export")
            data = folder.read(rel, MAX_PACKAGE_BYTES - total)
            total += len(data)
            if total >= MAX_PACKAGE_BYTES:
                raise InvalidArgs(f"{toolkit.dir}: more than {MAX_PACKAGE_BYTES} bytes to export")
            files[rel] = data
    return files


def _frontmatter(toolkit: Toolkit, name: str, description: str) -> list[str]:
    m = toolkit.manifest
    front = ["---", f"name: {name}", f"description: {_yaml_str(description)}"]
    if m.extra("LICENSE"):
        front.append(f"license: {_yaml_str(m.extra('LICENSE') or '')}")
    if m.extra("COMPATIBILITY"):
        front.append(f"compatibility: {_yaml_str(_fit(m.extra('COMPATIBILITY') or '', 500))}")
    tools_text = m.extra("ALLOWED_TOOLS")
    if tools_text:
        try:
            tools: Any = json.loads(tools_text)
        except ValueError:
            tools = tools_text  # written by hand: a space-separated list
        if isinstance(tools, list):
            front.append("allowed-tools:")
            front += [f"  - {_yaml_str(str(t))}" for t in tools]
        else:
            front.append(f"allowed-tools: {_yaml_str(str(tools))}")
    meta = {"toolkit": m.id, "version": m.version, "trust": m.trust, "generator": "wbcore"}
    if m.author_did:
        meta["author_did"] = m.author_did
    kept = m.extra("SKILL_METADATA")
    if kept:
        try:
            extra = json.loads(kept)
        except ValueError:
            extra = None
        if not isinstance(extra, dict):
            raise InvalidArgs(
                f"{m.path}: SKILL_METADATA: not a JSON object of strings; fix or remove the keyword"
            )
        meta.update({str(k): str(v) for k, v in extra.items()})
    front.append("metadata:")
    front += [f"  {k}: {_yaml_str(v)}" for k, v in meta.items()]
    front.append("---")
    return front


def render(toolkit: Toolkit, runtime: RuntimeServices | None = None) -> dict[str, bytes]:
    """The package's files (relative path → bytes), without writing anything.

    A toolkit imported from an Agent Skills package and not edited since gives back that
    package byte for byte (:func:`_original_package`). Otherwise SKILL.md is ``# title`` +
    the overview skill (headings one level down); each other skill
    is a markdown document at its ``#+SOURCE`` path (else ``references/<slug>.md``); what the
    body does not name yet is listed under ``## References``, so a package imported back
    exports to the same bytes. Given the ``runtime``, each skill is read through
    ``trust.skill_text``: the bytes written are the bytes its signature covers."""
    original = _original_package(toolkit)
    if original is not None:
        return original
    m = toolkit.manifest
    name = skill_name(m.id)
    description = " ".join(m.tagline.split())
    if m.exec:
        description += f" Runs sandboxed through wbx (toolkit {m.id})."
    description = _fit(description, MAX_DESCRIPTION)
    files = _package_files(toolkit)
    docs: dict[str, bytes] = {}

    def skill_text(slug: str) -> str:
        return toolkit.skill_text(slug) if runtime is None else trust.skill_text(toolkit, runtime, slug)

    links: list[tuple[str, str, str]] = []
    for s in toolkit.skills:
        if s.slug == "overview":
            continue
        text = skill_text(s.slug)
        title, _ = _strip_title(text)
        path = _doc_path(text, s.slug)
        if path in docs or path in files:
            path = f"references/{s.slug}.md" if path != f"references/{s.slug}.md" else path
        if path in docs or path in files or path == "SKILL.md":
            raise InvalidArgs(
                f"{toolkit.dir}: skill {s.slug} and another file both export as {path}; rename one"
            )
        md = markup.org_to_md(text, shift=1).strip("\n")
        docs[path] = (f"# {title or s.title}\n" + (f"\n{md}\n" if md else "")).encode("utf-8")
        summary = markup.org_to_md(s.summary).strip() if s.summary else ""
        links.append((path, s.title, summary))
    blocks = [f"# {m.title}"]
    if any(s.slug == "overview" for s in toolkit.skills):
        overview = markup.org_to_md(skill_text("overview"), shift=1).strip("\n")
    else:
        overview = m.tagline
    if overview:
        blocks.append(overview)
    if m.exec and not re.search(r"^## Running\s*$", overview, re.MULTILINE):
        run = [
            f"## Running\n\nThis toolkit's `{m.exec}` artifact runs sandboxed as WebAssembly, never natively:"
        ]
        if m.cli_bin:
            run.append(f"```sh\nwbx run {m.cli_bin} [ARGS...] < input\n```")
        run.append(f"Capabilities it may request: {' '.join(m.caps) or 'none'}.")
        blocks.append("\n\n".join(run))
    # A document the body already names (a link, or its path as text: "read FORMS.md") gets no
    # second mention; the others are listed so an agent knows they exist.
    text_so_far = "\n\n".join(blocks).lower()
    missing = [(p, t, s) for p, t, s in links if p.lower() not in text_so_far]
    if missing:
        blocks.append(
            "## References\n\n" + "\n".join(f"- [{t}]({p})" + (f": {s}" if s else "") for p, t, s in missing)
        )
    skill_md = "\n".join(_frontmatter(toolkit, name, description)) + "\n\n" + "\n\n".join(blocks) + "\n"
    out = {"SKILL.md": skill_md.encode("utf-8"), **docs}
    for rel, data in files.items():
        if rel in out or rel.lower() == "skill.md":
            raise InvalidArgs(f"{toolkit.dir}: the file {rel} would replace a generated document; rename it")
        out[rel] = data
    return out


def _write_package(files: dict[str, bytes], target: Path, *, force: bool) -> None:
    if (target.exists() or target.is_symlink()) and not force:
        raise InvalidArgs(f"{target} exists (use --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".export-{target.name}-", dir=target.parent))
    try:
        for rel, data in files.items():
            p = stage / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        if target.exists() or target.is_symlink():
            trash = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
            os.rename(target, trash / "old")
            os.rename(stage, target)
            unpack.remove_tree(trash)
        else:
            os.rename(stage, target)
    finally:
        if stage.exists():
            unpack.remove_tree(stage)


def export_agent_skills(toolkit: Toolkit, out_dir: Path, *, force: bool = False,
                        runtime: RuntimeServices | None = None) -> Path:
    """Write ``out_dir/<name>/`` (SKILL.md + references/); returns the package folder."""
    target = out_dir / skill_name(toolkit.id)
    _write_package(render(toolkit, runtime), target, force=force)
    return target


def export_index(toolkits: list[Toolkit], site: Path, *, force: bool = True,
                 runtime: RuntimeServices | None = None) -> Path:
    """Write the packages and ``.well-known/agent-skills/index.json`` under ``site``; returns the
    index path."""
    base = site / WELL_KNOWN
    base.mkdir(parents=True, exist_ok=True)
    index_path = base / "index.json"
    entries: dict[str, dict[str, Any]] = {}
    if index_path.is_file():
        try:
            for e in json.loads(index_path.read_text(encoding="utf-8")).get("skills", []):
                if isinstance(e, dict) and isinstance(e.get("name"), str):
                    entries[e["name"]] = e
        except (ValueError, AttributeError):
            raise InvalidArgs(f"{index_path} exists but is not a discovery index; move it aside") from None
    for tk in toolkits:
        files = render(tk, runtime)
        name = skill_name(tk.id)
        _write_package(files, base / name, force=force)
        description = _frontmatter_description(files["SKILL.md"])
        if len(files) == 1:
            data = files["SKILL.md"]
            entry = {"name": name, "type": "skill-md", "description": description,
                     "url": f"/.well-known/agent-skills/{name}/SKILL.md"}
        else:
            data = deterministic_targz(name, files)
            atomic_write(base / f"{name}.tar.gz", data)
            entry = {"name": name, "type": "archive", "description": description,
                     "url": f"/.well-known/agent-skills/{name}.tar.gz"}
        entry["digest"] = "sha256:" + hashlib.sha256(data).hexdigest()
        entries[name] = entry
    index = {"$schema": INDEX_SCHEMA, "skills": [entries[k] for k in sorted(entries)]}
    atomic_write(index_path, (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return index_path


def _frontmatter_description(skill_md: bytes) -> str:
    for line in skill_md.decode("utf-8").splitlines()[1:]:
        if line.startswith("description: "):
            return json.loads(line[len("description: "):])
        if line == "---":
            break
    return ""
