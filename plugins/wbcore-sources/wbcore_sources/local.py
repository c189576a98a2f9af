"""``path:<dir>``: a folder inside the toolkit, never outside it."""

from __future__ import annotations

from pathlib import Path

from wbcore_runtime.guard import paths
from wbcore_runtime.build import ResolvedSource, SourceRequest, tree_digest


def inside(base: Path, rel: str, label: str = paths.TOOLKIT_ROOT) -> Path:
    """``base/rel`` (a file or a folder) by the core's one containment rule
    (:mod:`wbcore_runtime.guard.paths`): relative, no ``..``, every symlink on the way staying inside, files
    single-linked."""
    return paths.inside(base, rel, expect="any", label=label)


class PathSource:
    def resolve(self, request: SourceRequest) -> ResolvedSource:
        tk_dir = request.manifest.dir
        target = inside(tk_dir, request.rest)
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
        inside(tk_dir, rel)  # the entry must exist inside the toolkit
        return ResolvedSource(digest=tree_digest(tk_dir), dir=tk_dir, entry=None if rel == "." else rel)
