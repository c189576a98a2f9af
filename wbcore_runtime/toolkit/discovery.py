"""Find toolkits on disk (seed 000 "Discovery", seed 001 "Toolkit search path").

Roots, in order: ``$WB_TOOLKITS_ROOT`` (only if it names an existing directory), else
the first of ``./toolkits`` and ``../toolkits`` that exists, then the ``toolkits`` folders
a project's ``wbx.toml`` names (:mod:`wbcore_runtime.store.home`); then the user root
``$WB_HOME/toolkits``; then every entry of ``WB_TOOLKIT_PATH`` (colon-separated).
A toolkit id found in two roots resolves to the first; the later copy is recorded as
shadowed. A malformed manifest is an error entry; discovery of the others continues.
Roots are unauthenticated, writable input: reading is open, execution is gated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wbcore_runtime.contract.errors import ManifestError, NotFound, unknown_name
from wbcore_runtime.store import home as _home
from wbcore_runtime.guard import paths

if TYPE_CHECKING:  # the manifest parser and containment load with discovery itself, not with roots()
    from wbcore_runtime.toolkit import manifest as _manifest
    from wbcore_runtime.toolkit.manifest_cache import ManifestCache
    from wbcore_runtime.toolkit.loaded import Toolkit

MANIFEST = "manifest.org"


def default_home(env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """``$WB_HOME``, else the home named by the project's ``wbx.toml``, else ``~/.workbooks``
    (:func:`wbcore_runtime.store.home.choose`)."""
    return _home.choose(env, cwd).path


def candidates(env: Mapping[str, str], cwd: Path, home: Path) -> list[Path]:
    """Every folder the search path names, existing or not, in order (for messages)."""
    found: list[Path] = []
    pinned = env.get("WB_TOOLKITS_ROOT")
    if pinned and Path(pinned).is_dir():
        found.append(Path(pinned))
    else:
        local = [cwd / "toolkits", cwd.parent / "toolkits"]
        first = next((c for c in local if c.is_dir()), None)
        found.extend([first] if first is not None else local)
        project = _home.find_project(cwd)
        if project is not None:
            found.extend(project.toolkits)
    found.append(home / "toolkits")
    for entry in (env.get("WB_TOOLKIT_PATH") or "").split(os.pathsep):
        if entry:
            found.append(Path(entry).expanduser())
    return found


def roots(env: Mapping[str, str], cwd: Path, home: Path) -> list[Path]:
    """The search path, first match wins. Non-existent entries are dropped."""
    unique: list[Path] = []
    seen: set[str] = set()
    for root in candidates(env, cwd, home):
        if not root.is_dir():
            continue
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            unique.append(root)
    return unique


def not_found_hint(searched: list[Path]) -> str:
    """What to say when no toolkit is found: the folders searched and how to add one."""
    listed = ", ".join(f"{p}{'' if p.is_dir() else ' (missing)'}" for p in searched) or "(no folders)"
    return (f"no toolkits found; searched: {listed}. Add a root with WB_TOOLKIT_PATH=<folder of toolkits>, "
            f"install one with wbx toolkit install <folder|git+…|archive>, or run wbx inside a project "
            f"(a folder with ./toolkits or a wbx.toml)")


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
    from wbcore_runtime.toolkit import manifest as _manifest  # deferred: keeps wbx start-up light

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
    from wbcore_runtime.toolkit import manifest as _manifest  # deferred: keeps wbx start-up light
    from wbcore_runtime.toolkit.manifest_cache import ManifestCache  # deferred: keeps wbx start-up light
    from wbcore_runtime.toolkit.loaded import Toolkit  # deferred: keeps wbx start-up light

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
    from wbcore_runtime.toolkit.loaded import Toolkit  # deferred: keeps wbx start-up light

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
