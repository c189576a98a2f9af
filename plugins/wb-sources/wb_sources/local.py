"""``path:<dir>``: a folder inside the toolkit, never outside it."""

from __future__ import annotations

import os
from pathlib import Path

from wbcore.build import ResolvedSource, SourceRequest, tree_digest
from wbcore.errors import InvalidArgs, NotFound


def inside(base: Path, rel: str, what: str) -> Path:
    """``base/rel`` after resolving symlinks, or an error if it leaves ``base``."""
    if os.path.isabs(rel) or "\x00" in rel:
        raise InvalidArgs(f"{what} {rel!r} must be a relative path inside {base}")
    real_base = Path(os.path.realpath(base))
    target = Path(os.path.realpath(base / rel))
    if target != real_base and real_base not in target.parents:
        raise InvalidArgs(f"{what} {rel!r} escapes {base}")
    return target


class PathSource:
    def resolve(self, request: SourceRequest) -> ResolvedSource:
        tk_dir = request.manifest.dir
        target = inside(tk_dir, request.rest, "path:")
        if not target.exists():
            raise NotFound(f"path:{request.rest} does not exist in {tk_dir}")
        if target.is_file():
            return ResolvedSource(digest=tree_digest(target.parent), dir=target.parent, entry=target.name)
        return ResolvedSource(digest=tree_digest(target), dir=target)


class EntrySource:
    """``gobuild:<pkg>`` / ``zigbuild:<rel>``: the toolkit folder plus the entry its lane builds."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        tk_dir = request.manifest.dir
        rel = request.rest.strip()
        if self.prefix == "gobuild:" and rel.startswith("./"):
            rel = rel[2:]
        rel = rel.rstrip("/") or "."
        target = inside(tk_dir, rel, self.prefix)
        if not target.exists():
            raise NotFound(f"{self.prefix}{request.rest} does not exist in {tk_dir}")
        return ResolvedSource(digest=tree_digest(tk_dir), dir=tk_dir, entry=None if rel == "." else rel)
