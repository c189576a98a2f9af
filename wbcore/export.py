"""``wbx toolkit export``: a toolkit as an Agent Skills package, and a well-known discovery index.

``--agent-skills DIR`` writes ``DIR/<name>/SKILL.md`` (YAML frontmatter ``name`` and
``description``, the overview as its body, an index of the other skills) and
``references/<slug>.md`` for every other skill. ``--index DIR`` also writes
``DIR/.well-known/agent-skills/index.json`` (discovery schema 0.2.0): one entry per
toolkit, ``type`` ``skill-md`` (just SKILL.md) or ``archive`` (a deterministic
``.tar.gz`` of the package), with ``digest`` = ``sha256:`` of exactly those bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from wbcore import markup, unpack
from wbcore.errors import InvalidArgs
from wbcore.toolkit import Toolkit

INDEX_SCHEMA = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"
WELL_KNOWN = Path(".well-known") / "agent-skills"
MAX_DESCRIPTION = 1024
NAME_MAX = 64


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


def render(toolkit: Toolkit) -> dict[str, bytes]:
    """The package's files (relative path → bytes), without writing anything."""
    m = toolkit.manifest
    name = skill_name(m.id)
    description = " ".join(m.tagline.split())
    if m.exec:
        description += f" Runs sandboxed through wbx (toolkit {m.id})."
    description = description[:MAX_DESCRIPTION]
    files: dict[str, bytes] = {}
    others = [s for s in toolkit.skills if s.slug != "overview"]
    meta = {"toolkit": m.id, "version": m.version, "trust": m.trust, "generator": "wbcore"}
    if m.author_did:
        meta["author_did"] = m.author_did
    front = ["---", f"name: {name}", f"description: {_yaml_str(description)}"]
    if m.extra("LICENSE"):
        front.append(f"license: {_yaml_str(m.extra('LICENSE') or '')}")
    front.append("metadata:")
    front += [f"  {k}: {_yaml_str(v)}" for k, v in meta.items()]
    front.append("---")
    body = [f"# {m.title}", "", m.tagline, ""]
    overview = next((s for s in toolkit.skills if s.slug == "overview"), None)
    if overview is not None:
        body.append(markup.org_to_md(toolkit.skill_text("overview"), shift=1).rstrip("\n"))
        body.append("")
    if m.exec:
        body += ["## Running", "", f"This toolkit's `{m.exec}` artifact runs sandboxed as WebAssembly, never natively:", ""]
        if m.cli_bin:
            body += ["```sh", f"wbx run {m.cli_bin} [ARGS...] < input", "```", ""]
        caps = " ".join(m.caps) or "none"
        body += [f"Capabilities it may request: {caps}.", ""]
    if others:
        body += ["## References", ""]
        for s in others:
            summary = markup.org_to_md(s.summary).strip() if s.summary else ""
            body.append(f"- [{s.title}](references/{s.slug}.md)" + (f": {summary}" if summary else ""))
            title, text = _strip_title(toolkit.skill_text(s.slug))
            ref = f"# {title or s.title}\n\n" + markup.org_to_md(text, shift=1)
            files[f"references/{s.slug}.md"] = ref.encode("utf-8")
        body.append("")
    files["SKILL.md"] = ("\n".join(front) + "\n\n" + "\n".join(body).rstrip("\n") + "\n").encode("utf-8")
    return files


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


def export_agent_skills(toolkit: Toolkit, out_dir: Path, *, force: bool = False) -> Path:
    """Write ``out_dir/<name>/`` (SKILL.md + references/); returns the package folder."""
    target = out_dir / skill_name(toolkit.id)
    _write_package(render(toolkit), target, force=force)
    return target


def deterministic_targz(name: str, files: dict[str, bytes]) -> bytes:
    """The same files always give the same bytes (sorted, mtime 0, owner 0, fixed modes)."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for rel in sorted(files):
                data = files[rel]
                info = tarfile.TarInfo(f"{name}/{rel}")
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tf.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def export_index(toolkits: list[Toolkit], site: Path, *, force: bool = True) -> Path:
    """Write the packages and ``.well-known/agent-skills/index.json`` under ``site``; returns the index path."""
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
        files = render(tk)
        name = skill_name(tk.id)
        _write_package(files, base / name, force=force)
        description = _frontmatter_description(files["SKILL.md"])
        if len(files) == 1:
            data = files["SKILL.md"]
            entry = {"name": name, "type": "skill-md", "description": description,
                     "url": f"/.well-known/agent-skills/{name}/SKILL.md"}
        else:
            data = deterministic_targz(name, files)
            archive = base / f"{name}.tar.gz"
            tmp = base / f".{name}.tar.gz.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, archive)
            entry = {"name": name, "type": "archive", "description": description,
                     "url": f"/.well-known/agent-skills/{name}.tar.gz"}
        entry["digest"] = "sha256:" + hashlib.sha256(data).hexdigest()
        entries[name] = entry
    index = {"$schema": INDEX_SCHEMA, "skills": [entries[k] for k in sorted(entries)]}
    tmp = base / ".index.json.tmp"
    tmp.write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, index_path)
    return index_path


def _frontmatter_description(skill_md: bytes) -> str:
    for line in skill_md.decode("utf-8").splitlines()[1:]:
        if line.startswith("description: "):
            return json.loads(line[len("description: "):])
        if line == "---":
            break
    return ""
