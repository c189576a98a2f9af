"""``#+PREOPEN``: a read-only folder of a command's own toolkit, seen by the guest at a path.

``#+PREOPEN: <folder> [<guest path>]`` (guest path default ``/<folder>``): the folder is
resolved inside the toolkit folder by the one containment rule (:func:`wbcore_runtime.paths.inside`:
relative, no ``..``, every symlink staying inside), recorded at build time in the
registry entry's options (``preopen``), and checked again by the same rule when a call
applies it, so a folder swapped for a link out after the build is refused, not followed.
The command runner maps it read-only (WASI cannot create, write, rename or delete there).
A guest that would read ``/dev/urandom`` gets WASI's ``random_get`` instead (wasi-libc's
``getentropy``/``arc4random``): no host device is ever preopened.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wbcore_runtime.errors import InvalidArgs, NotFound

#: The registry entry option that carries a command's preopen.
OPTION = "preopen"


def parse(value: str) -> tuple[str, str]:
    """``(folder, guest path)`` of a ``#+PREOPEN`` value, or ``InvalidArgs`` saying what is wrong."""
    parts = value.split()
    if not parts or len(parts) > 2:
        raise InvalidArgs(f"#+PREOPEN: {value!r}: write '<folder> [<guest path>]', e.g. '#+PREOPEN: data /data'")
    folder = parts[0].strip("/") or "."
    guest = parts[1] if len(parts) == 2 else "/" + folder
    norm = posixpath.normpath(guest)
    if not guest.startswith("/") or norm != guest.rstrip("/") or norm == "/" or "\0" in guest or ".." in guest.split("/"):
        raise InvalidArgs(f"#+PREOPEN: guest path {guest!r} must be an absolute, normalised path other than '/'")
    return folder, norm


def option(toolkit_dir: Path, value: str | None) -> dict[str, Any]:
    """The entry options a build records for ``#+PREOPEN`` (``{}`` without one); the folder
    must exist inside ``toolkit_dir`` (``Refused``/``InvalidArgs`` naming it otherwise)."""
    if not value:
        return {}
    from wbcore_runtime import paths

    folder, guest = parse(value)
    try:
        paths.inside(toolkit_dir, folder, expect="dir")
    except NotFound:
        raise InvalidArgs(f"#+PREOPEN: {folder!r} is not a folder inside {toolkit_dir}") from None
    return {OPTION: {"root": str(toolkit_dir), "dir": folder, "guest": guest}}


def resolve(options: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(host folder, guest path)`` to preopen for a call, re-checked by the containment
    rule now; ``None`` when the entry records none."""
    spec = options.get(OPTION)
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidArgs(f"registry entry option {OPTION!r} is malformed; rebuild the toolkit")
    from wbcore_runtime import paths

    folder, guest = parse(f"{spec.get('dir', '')} {spec.get('guest', '')}")
    host = paths.inside(Path(str(spec.get("root", ""))), folder, expect="dir")
    return str(host), guest
