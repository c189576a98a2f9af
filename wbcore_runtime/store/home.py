"""Where state lives: ``$WB_HOME``, else the project's ``wbx.toml``, else ``~/.workbooks``.

A project marks itself with a ``wbx.toml`` at its top; ``wbx`` run anywhere below it (and
the demo, and ``dev.py``) then uses that project's home and toolkit folders::

    # wbx.toml
    home = ".wb-home"          # the state folder, relative to this file, inside the project
    toolkits = ["toolkits"]    # extra toolkit roots, relative to this file (optional)

``$WB_HOME`` always wins. The walk up from the working directory costs one ``stat`` per
parent folder and parses the file only when one is found, so start-up stays cheap.

A marker is input like any file of the project: a home it names must resolve inside the
project folder (``home = "/etc"`` or ``"../x"`` is an error naming the file and the key),
and an existing home owned by another user is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.frozen import Frozen, set_fields
from wbcore_runtime.guard import paths

MARKER = "wbx.toml"
USER_HOME = Path("~") / ".workbooks"
#: Folders the walk never climbs past (a marker there would capture every project below).
_MAX_DEPTH = 64
_MAX_MARKER_BYTES = 64 << 10


class Project(Frozen):
    """A folder with a ``wbx.toml``: its home and extra toolkit roots, resolved."""

    __slots__ = __match_args__ = ("root", "marker", "home", "toolkits")
    root: Path
    marker: Path
    home: Path | None
    toolkits: tuple[Path, ...]

    def __init__(self, root: Path, marker: Path, home: Path | None = None,
                 toolkits: tuple[Path, ...] = ()) -> None:
        set_fields(self, root=root, marker=marker, home=home, toolkits=toolkits)


class Home(Frozen):
    """The chosen state folder and why (shown by the demo and ``toolkit list``)."""

    __slots__ = __match_args__ = ("path", "source", "project")
    path: Path
    source: str  # "WB_HOME", "wbx.toml" or "default"
    project: Project | None

    def __init__(self, path: Path, source: str, project: Project | None = None) -> None:
        set_fields(self, path=path, source=source, project=project)

    def describe(self) -> str:
        if self.source == "WB_HOME":
            return f"{self.path} (from $WB_HOME)"
        if self.source == "wbx.toml" and self.project is not None:
            return f"{self.path} (from {self.project.marker})"
        return f"{self.path} (the default; no wbx.toml above the working folder and no $WB_HOME)"


def find_project(cwd: Path) -> Project | None:
    """The nearest ``wbx.toml`` at or above ``cwd``, parsed, or ``None``."""
    here = Path(os.path.abspath(cwd))
    for _ in range(_MAX_DEPTH):
        marker = here / MARKER
        if os.path.isfile(marker):
            return _load(marker)
        if here.parent == here:
            return None
        here = here.parent
    return None


def _inside(root: Path, rel: object, marker: Path, key: str) -> Path:
    if not isinstance(rel, str) or not rel.strip():
        raise InvalidArgs(f"{marker}: {key}: want a folder name relative to this file, got {rel!r}")

    base = os.path.realpath(root)
    outside = InvalidArgs(f"{marker}: {key}: {rel!r} resolves outside the project folder {base}; "
                          f"name a folder inside it, or set WB_HOME instead")
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if rel.startswith(("/", "~")) or ".." in parts:
        raise outside
    # The core's one containment function checks the part that exists (a folder made later,
    # e.g. a home not created yet, has no link to follow); the rest is plain names under it.
    for cut in range(len(parts), -1, -1):
        try:
            found = paths.inside(base, "/".join(parts[:cut]) or ".", expect="dir", label="the project folder")
        except paths.Refused as exc:
            raise InvalidArgs(f"{marker}: {key}: {rel!r}: {exc.reason}; name a folder inside the project "
                              f"folder {base}, or set WB_HOME instead") from None
        except NotFound:  # not made yet: check the folder above it
            if cut == 0:
                raise outside from None
            continue
        return Path(found, *parts[cut:])
    raise outside


def parse_marker(text: str, marker: Path) -> dict[str, object]:
    """The small TOML subset a marker uses: ``key = "string"`` and ``key = ["a", "b"]``
    lines, ``#`` comments. Read without ``tomllib``, whose import costs more than the
    whole walk (start-up budget); any other form is an error naming the line."""
    import json

    data: dict[str, object] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.strip()
        try:
            if not eq or not key.replace("_", "a").isalnum():
                raise ValueError
            parsed, end = json.JSONDecoder().raw_decode(value)
            rest = value[end:].strip()
            if rest and not rest.startswith("#"):
                raise ValueError
            data[key] = parsed
        except ValueError:
            raise InvalidArgs(f"{marker}:{no}: want key = \"folder\" or key = [\"folder\", …], "
                              f"got {raw.strip()!r}") from None
    return data


def _load(marker: Path) -> Project:
    try:
        if marker.stat().st_size > _MAX_MARKER_BYTES:
            raise InvalidArgs(f"{marker}: over the {_MAX_MARKER_BYTES}-byte cap for a project marker")
        data = parse_marker(marker.read_text(encoding="utf-8"), marker)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgs(f"{marker}: cannot read it: {exc}") from None
    root = marker.parent
    unknown = sorted(set(data) - {"home", "toolkits"})
    if unknown:
        raise InvalidArgs(f"{marker}: unknown key(s) {', '.join(unknown)}; known: home, toolkits")
    home = _inside(root, data["home"], marker, "home") if "home" in data else None
    if home is not None and home.exists() and hasattr(os, "getuid") and home.stat().st_uid != os.getuid():
        raise InvalidArgs(f"{marker}: home: {home} belongs to another user; set WB_HOME to a folder of yours")
    raw = data.get("toolkits", [])
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise InvalidArgs(f"{marker}: toolkits: want a list of folder names, got {raw!r}")
    toolkits = tuple(_inside(root, r, marker, "toolkits") for r in raw)
    return Project(root=root, marker=marker, home=home, toolkits=toolkits)


def choose(env: Mapping[str, str], cwd: Path | None = None) -> Home:
    """``$WB_HOME`` if set; else the home of the project around ``cwd``; else ``~/.workbooks``."""
    if env.get("WB_HOME"):
        return Home(Path(env["WB_HOME"]).expanduser(), "WB_HOME")
    project = find_project(cwd if cwd is not None else Path.cwd())
    if project is not None and project.home is not None:
        return Home(project.home, "wbx.toml", project)
    return Home(USER_HOME.expanduser(), "default", project)
