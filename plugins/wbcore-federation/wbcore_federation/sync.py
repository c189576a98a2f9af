"""SYNC: mirror an entity's rows into ``:task:`` nodes of an Org file.

Each row is one level-1 heading tagged ``:task:`` whose drawer carries a stable id,
``<toolkit>-<entity>-<key>`` (the same row always gets the same id), and the row's fields::

    * Fix the login :task:
      :PROPERTIES:
      :ID: tracker-issues-17
      :FED_KEY: 17
      :STATE: open
      :END:
    (anything a person writes below the drawer is kept)

- **Idempotent**: the file is rendered from the rows and the file as it is; when nothing
  changed the bytes are the same and the file is not written at all.
- **In place**: a changed row rewrites its own heading and drawer where the node already
  sits; the text below the drawer and every other node stay as they are. New rows are
  appended in key order.
- **Deletions marked**: a node whose row is gone gets the ``:deleted:`` tag and
  ``:FED_DELETED: t``; it is not removed (a person's notes may hang under it). A row that
  comes back is unmarked.
- **Atomic**: the new file is written beside the old, fsynced, and renamed over it, so a
  crash mid-sync leaves the old file or the new one, never a mix.
- **Inert values**: a value from the source is one line of text in the file: newlines and
  control characters become spaces, so a row cannot forge a heading, a drawer or a keyword.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_federation.query import columns_of, scalar
from wbcore_federation.spec import Entity
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.contract.errors import InvalidArgs

MAX_FILE = 64 << 20
_CTRL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u0085]+")
_ID_RE = re.compile(r"^\s*:ID:\s*(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Synced:
    path: Path
    written: bool
    added: int
    updated: int
    deleted: int
    unchanged: int


def inert(value: Any) -> str:
    """A value as one line of Org text that cannot start structure."""
    v = scalar(value, "a synced field")
    text = "" if v is None else str(v)
    return _CTRL.sub(" ", text).strip()


def node_id(toolkit: str, entity: str, key: Any) -> str:
    k = re.sub(r"[^A-Za-z0-9._-]", lambda m: f"%{ord(m.group()):02X}", inert(key))
    return f"{toolkit}-{entity}-{k}"


def _heading(title: str, deleted: bool) -> str:
    title = title or "(untitled)"
    if title.startswith("*"):
        title = "\u200b" + title  # a title is never read as a deeper heading
    # A title ending in ":word:" would read as tags: keep it text.
    if re.search(r"\s:[\w@#%:]+:$", title):
        title += " \u200b"
    return f"* {title} :task:{'deleted:' if deleted else ''}"


def _drawer(node: str, key: Any, cols: Sequence[str], row: Mapping[str, Any], deleted: bool) -> list[str]:
    out = ["  :PROPERTIES:", f"  :ID: {node}", f"  :FED_KEY: {inert(key)}"]
    for c in cols:
        value = inert(row.get(c))
        out.append(f"  :{c.upper()}: {value}".rstrip())
    if deleted:
        out.append("  :FED_DELETED: t")
    out.append("  :END:")
    return out


def _split(text: str) -> tuple[list[str], list[list[str]]]:
    """The preamble lines and the level-1 blocks (each a list of lines)."""
    pre: list[str] = []
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("* ") or line == "*":
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        else:
            pre.append(line)
    return pre, blocks


def _block_id(block: list[str]) -> str | None:
    if len(block) < 2 or block[1].strip().upper() != ":PROPERTIES:":
        return None
    for line in block[2:]:
        if line.strip().upper() == ":END:":
            return None
        m = _ID_RE.match(line)
        if m:
            return m.group(1)
    return None


def _body(block: list[str]) -> list[str]:
    """What follows the drawer (kept across syncs)."""
    for i, line in enumerate(block[1:], 1):
        if line.strip().upper() == ":END:":
            return block[i + 1:]
    return block[1:]


def render(
    existing: str, *, toolkit: str, entity: Entity, rows: Sequence[Mapping[str, Any]]
) -> tuple[str, Synced]:
    cols = [c for c in columns_of(entity, rows) if c != entity.key]
    by_id: dict[str, Mapping[str, Any]] = {}
    order: list[tuple[Any, str]] = []
    for r in rows:
        key = r.get(entity.key)
        if key is None:
            raise InvalidArgs(
                f"{toolkit}/{entity.name}: a row has no {entity.key!r} (the :KEY: field); cannot give it a "
                "stable id"
            )
        rid = node_id(toolkit, entity.name, key)
        if rid in by_id:
            raise InvalidArgs(f"{toolkit}/{entity.name}: two rows share the key {inert(key)!r}")
        by_id[rid] = r
        order.append((key, rid))
    if existing:
        pre, blocks = _split(existing)
    else:
        pre = [f"#+TITLE: {toolkit} {entity.name}", f"#+FED_SOURCE: {toolkit}/{entity.name}",
               "# Mirrored by wbx fed sync: headings and drawers are rewritten from the source;",
               "# text below a drawer is yours and is kept.", ""]
        blocks = []
    added = updated = deleted = unchanged = 0
    seen: set[str] = set()
    out_blocks: list[list[str]] = []
    for block in blocks:
        nid = _block_id(block)
        if nid is None or not nid.startswith(f"{toolkit}-{entity.name}-"):
            out_blocks.append(block)  # not ours: kept as it is
            continue
        seen.add(nid)
        row = by_id.get(nid)
        if row is None:
            key = next((ln.split(":FED_KEY:", 1)[1].strip() for ln in block if ":FED_KEY:" in ln), "")
            title = re.sub(r"\s+:[\w@#%:]+:$", "", block[0][2:]).strip()
            props = _drawer_props(block)
            new = [
                _heading(title, True),
                *_drawer(
                    nid, key, [c for c in props if c not in ("ID", "FED_KEY", "FED_DELETED")],
                    {c: props[c] for c in props}, True,
                ),
            ]
            new_block = new + _body(block)
            deleted += new_block != block
            unchanged += new_block == block
        else:
            new_block = [
                _heading(inert(row.get(entity.title)), False),
                *_drawer(nid, row.get(entity.key), cols, row, False),
            ]
            new_block += _body(block)
            updated += new_block != block
            unchanged += new_block == block
        out_blocks.append(new_block)
    for _, nid in sorted(((_order_key(k), n) for k, n in order if n not in seen)):
        row = by_id[nid]
        out_blocks.append(
            [
                _heading(inert(row.get(entity.title)), False),
                *_drawer(nid, row.get(entity.key), cols, row, False),
            ]
        )
        added += 1
    lines = list(pre)
    for b in out_blocks:
        lines += b
    text = "\n".join(lines) + "\n"
    return text, Synced(Path(), False, added, updated, deleted, unchanged)


def _order_key(key: Any) -> tuple[int, float, str]:
    """New rows are appended in key order: numbers numerically, then text."""
    text = inert(key)
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _drawer_props(block: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in block[2:]:
        s = line.strip()
        if s.upper() == ":END:":
            break
        m = re.match(r"^:([A-Za-z0-9_-]+):\s?(.*)$", s)
        if m:
            props[m.group(1).upper()] = m.group(2)
    return props


def sync(path: Path, *, toolkit: str, entity: Entity, rows: Sequence[Mapping[str, Any]]) -> Synced:
    """Bring ``path`` in line with ``rows``; writes only when the bytes change, atomically."""
    existing = ""
    if path.is_symlink():
        raise InvalidArgs(f"{path} is a symbolic link; sync writes a plain file")
    if path.exists():
        if path.stat().st_size > MAX_FILE:
            raise InvalidArgs(f"{path}: over the {MAX_FILE}-byte cap for a synced file")
        existing = path.read_text(encoding="utf-8")
    text, counts = render(existing, toolkit=toolkit, entity=entity, rows=rows)
    data = text.encode("utf-8")
    written = data != existing.encode("utf-8")
    if written:
        atomic_write(path, data, sync_dir=True)
    return Synced(path, written, counts.added, counts.updated, counts.deleted, counts.unchanged)
