"""``#+PREOPEN``: a read-only folder of a command's own toolkit, seen by the guest at a path.

``#+PREOPEN: <folder> [<guest path>]`` (guest path default ``/<folder>``): the folder is
resolved inside the toolkit's verified build snapshot by the one containment rule
(:func:`wbcore_runtime.guard.paths.inside`: relative, no ``..``, every symlink staying inside),
copied at build time into the home's content-addressed tree store
(``$WB_HOME/store/trees/<digest>``, read-only), and the registry entry's options
(``preopen``) record that digest. A call maps the stored copy, never the toolkit folder:
a file changed there after the build (by any means, stat identity kept or not) changes
nothing a call sees until the toolkit is verified and built again. The command runner
maps it read-only (WASI cannot create, write, rename or delete there).
A guest that would read ``/dev/urandom`` gets WASI's ``random_get`` instead (wasi-libc's
``getentropy``/``arc4random``): no host device is ever preopened.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import tree_path

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


def option(toolkit_dir: Path, value: str | None, *, home: Path, folder: str | None = None) -> dict[str, Any]:
    """The entry options a build records for ``#+PREOPEN`` (``{}`` without one): the folder
    (``folder``, default the one ``value`` names) must exist inside ``toolkit_dir``
    (``Refused``/``InvalidArgs`` naming it otherwise); it is copied into ``home``'s
    content-addressed tree store (:func:`wbcore_runtime.build.snapshot.store_tree`) and the
    entry records the tree's digest."""
    if not value:
        return {}
    from wbcore_runtime.build import snapshot  # deferred: keeps wbx start-up light

    named, guest = parse(value)
    folder = folder or named
    try:
        host = paths.inside(toolkit_dir, folder, expect="dir")
    except NotFound:
        raise InvalidArgs(f"#+PREOPEN: {folder!r} is not a folder inside {toolkit_dir}") from None
    digest, _ = snapshot.store_tree(Path(home), host, label=f"the #+PREOPEN folder {folder!r}")
    return {OPTION: {"tree": digest, "dir": named, "guest": guest}}


def resolve(options: Mapping[str, Any], home: Path) -> tuple[str, str] | None:
    """``(host folder, guest path)`` to preopen for a call: the stored tree the build
    recorded, in ``home``'s tree store; ``None`` when the entry records none. An entry from
    before the store (it names a live folder) is refused with the fix."""
    spec = options.get(OPTION)
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidArgs(f"registry entry option {OPTION!r} is malformed; rebuild the toolkit")

    folder, guest = parse(f"{spec.get('dir', '')} {spec.get('guest', '')}")
    tree = spec.get("tree")
    if not isinstance(tree, str):
        raise InvalidArgs(f"#+PREOPEN {folder!r}: the registry entry names no stored copy (it was built before "
                          "preopened data was kept in the store); rebuild the toolkit (wbx toolkit build <id>)")
    try:
        host = tree_path(Path(home), tree)
    except (NotFound, InvalidArgs):
        raise NotFound(f"#+PREOPEN {folder!r}: the stored copy {tree[:12]}… is missing from {home}; rebuild the "
                       "toolkit (wbx toolkit build <id>)") from None
    return str(host), guest
