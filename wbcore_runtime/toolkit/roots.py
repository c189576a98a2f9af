"""Where toolkits are looked for: the home and the search path (seed 001 "Toolkit search path").

Roots, in order: ``$WB_TOOLKITS_ROOT`` (only if it names an existing directory), else
the first of ``./toolkits`` and ``../toolkits`` that exists, then the ``toolkits`` folders
a project's ``wbx.toml`` names (:mod:`wbcore_runtime.store.home`); then the user root
``$WB_HOME/toolkits``; then every entry of ``WB_TOOLKIT_PATH`` (colon-separated). Every command
computes them; a listing reads them (:mod:`wbcore_runtime.toolkit.discovery`, the manifest parser).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from wbcore_runtime.store import home as _home


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
