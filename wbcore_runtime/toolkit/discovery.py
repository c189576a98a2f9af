"""Find toolkits on disk (seed 000 "Discovery") in the roots of the search path
(:mod:`wbcore_runtime.toolkit.roots`, seed 001 "Toolkit search path").

A toolkit id found in two roots resolves to the first; the later copy is recorded as
shadowed. A malformed manifest is an error entry; discovery of the others continues.
Roots are unauthenticated, writable input: reading is open, execution is gated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from wbcore_runtime.contract.errors import ManifestError, NotFound, unknown_name
from wbcore_runtime.guard import paths
from wbcore_runtime.toolkit import manifest as _manifest
from wbcore_runtime.toolkit.loaded import Toolkit
from wbcore_runtime.toolkit.manifest_cache import ManifestCache

MANIFEST = "manifest.org"


@dataclass
class Discovery:
    """Everything found: toolkits by id (search-path order) and per-file errors."""

    roots: list[Path]
    toolkits: dict[str, Toolkit] = field(default_factory=dict)
    errors: list[ManifestError] = field(default_factory=list)

    def get(self, ident: str) -> Toolkit:
        if ident in self.toolkits:
            return self.toolkits[ident]
        for err in self.errors:
            if err.path.parent.name == ident:
                raise err
        raise NotFound(unknown_name("toolkit", ident, list(self.toolkits)))



def _toolkit_folder(search: paths.Root, entry: os.DirEntry[str]) -> paths.Root | None:
    """The entry as a toolkit's containment root; ``None`` when it is not a folder."""
    if entry.is_dir(follow_symlinks=False):
        # scandir already knows it is a real folder: no second lstat (1,000 toolkits stay fast).
        return paths.Root(search.shown / entry.name, os.path.join(search.real, entry.name))
    if not entry.is_symlink() or not entry.is_dir():
        return None
    try:
        return search.folder(entry.name, paths.TOOLKIT_ROOT)
    except NotFound:
        return None


def _load(folder: paths.Root, path: Path, name: str, cache: ManifestCache | None) -> _manifest.Manifest:
    """The folder's manifest: from the cache when the file is the one parsed before."""
    if cache is None:
        return _manifest.load(path, folder)
    try:
        _real, st = folder.resolve(MANIFEST, "file")  # containment as a read checks it
    except (paths.Refused, NotFound, OSError):
        return _manifest.load(path, folder)  # raises the error a read gives
    m = cache.get(name, path, st)
    if m is None:
        m = _manifest.load(path, folder)
        cache.put(name, st, m)
    return m


def discover_root(root: Path, home: Path | None = None) -> tuple[list[Toolkit], list[ManifestError]]:
    """The toolkits in ``root``; with ``home``, parsed manifests are cached there
    (:mod:`wbcore_runtime.toolkit.manifest_cache`)."""
    toolkits: list[Toolkit] = []
    errors: list[ManifestError] = []
    search = paths.Root.at(root, paths.SEARCH_ROOT)
    try:
        entries = sorted(os.scandir(search.real), key=lambda e: e.name)
    except OSError:
        return toolkits, errors
    cache = ManifestCache(home, search.real) if home is not None else None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = root / entry.name / MANIFEST
        try:
            folder = _toolkit_folder(search, entry)
        except paths.Refused as exc:  # a toolkit folder linked in from outside the root
            errors.append(ManifestError(path, 0, "file", f"the toolkit folder is a {exc.reason}"))
            continue
        if folder is None:
            continue
        try:
            m = _load(folder, path, entry.name, cache)
        except ManifestError as exc:
            if exc.line == 0 and exc.problem == _manifest.MISSING:
                continue  # a folder without a manifest is not a toolkit
            errors.append(exc)
            continue
        if m.format == "manifest" and m.id != entry.name:
            errors.append(
                ManifestError(path, m.lines.get("TOOLKIT", 1), "TOOLKIT",
                              f"{m.id!r} must equal the directory name {entry.name!r}")
            )
            continue
        toolkits.append(Toolkit(manifest=m, root=root))
    if cache is not None:
        cache.save()
    return toolkits, errors


def discover(search: list[Path], home: Path | None = None) -> Discovery:
    """Every toolkit on the search path (first root wins); ``home`` caches parsed manifests."""
    result = Discovery(roots=list(search))
    for root in search:
        found, errors = discover_root(root, home)
        result.errors.extend(errors)
        for tk in found:
            first = result.toolkits.get(tk.id)
            if first is None:
                result.toolkits[tk.id] = tk
            else:
                result.toolkits[tk.id] = Toolkit(first.manifest, first.root, first.shadows + (tk.dir,))
    return result
