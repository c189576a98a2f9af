"""``#+PREOPEN`` and ``#+SCRATCH``: read-only folders of a command's own toolkit, and a
writable scratch folder of its own, seen by the guest at paths it names.

``#+PREOPEN: <folder> [<guest path>]`` (guest path default ``/<folder>``; the keyword may be
given up to :data:`MAX_PREOPENS` times, no guest path twice; ``/`` is a guest path like any
other, for third-party WASI programs that open absolute paths under a preopened root): each
folder is resolved inside the toolkit's verified build snapshot by the one containment rule
(:func:`wbcore_runtime.guard.paths.inside`: relative, no ``..``, every symlink staying inside),
copied at build time into the home's content-addressed tree store
(``$WB_HOME/store/trees/<digest>``, read-only), and the registry entry's options
(``preopen``: a list of ``{tree, dir, guest}``) record those digests. A call maps the stored
copies, never the toolkit folder: a file changed there after the build (by any means, stat
identity kept or not) changes nothing a call sees until the toolkit is verified and built
again. The command runner maps them read-only (WASI cannot create, write, rename or delete
there).

``#+SCRATCH: <guest path> [<size>]`` (size ``64K``/``16M``…, default
:data:`SCRATCH_DEFAULT`, at most :data:`SCRATCH_MAX`): a writable folder made empty for each
call, bounded in bytes and files while the guest runs, removed after the call (entry option
``scratch``: ``{guest, bytes}``). Nothing of it survives into another call.

A guest whose preopens include ``/`` gets a per-call ``/dev`` too, holding ``urandom`` and
``random``: regular files of :data:`RANDOM_BYTES` fresh bytes from the host's CSPRNG (WASI
cannot preopen a device, and programs that read ``/dev/urandom`` by path — a temporary
file's name, a seed — fail without it). No host device is ever preopened; other guests get
randomness from WASI's ``random_get`` (wasi-libc's ``getentropy``/``arc4random``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.store.artifacts import tree_path

#: The registry entry options that carry a command's preopens and scratch folder.
OPTION = "preopen"
SCRATCH_OPTION = "scratch"
#: Folders one command may preopen (each is one WASI preopen descriptor).
MAX_PREOPENS = 8
SCRATCH_DEFAULT = 16 << 20
SCRATCH_MAX = 1 << 30
#: Files (and folders) a scratch folder may hold at once.
SCRATCH_FILES = 4096
#: Bytes of each per-call ``/dev/urandom`` and ``/dev/random`` file (under a ``/`` preopen).
RANDOM_BYTES = 64 << 10
#: Guest paths no preopen or scratch folder may take: the runner's own ``/dev``.
RESERVED = ("/dev",)

_SIZE_RE = re.compile(r"^([0-9]+)([KMG]?)i?B?$", re.IGNORECASE)


def _guest(value: str, guest: str, keyword: str) -> str:
    norm = posixpath.normpath(guest) if guest else ""
    if (not guest.startswith("/") or norm != (guest.rstrip("/") or "/") or "\0" in guest
            or ".." in guest.split("/")):
        raise InvalidArgs(f"#+{keyword}: {value!r}: guest path {guest!r} must be an absolute, "
                          "normalised path (e.g. /data, or / for the guest's root)")
    for reserved in RESERVED:
        if norm == reserved or norm.startswith(reserved + "/"):
            raise InvalidArgs(f"#+{keyword}: {value!r}: {reserved} is the runner's own (a guest under "
                              f"a / preopen gets {reserved}/urandom there); choose another guest path")
    return norm


def parse(value: str) -> tuple[str, str]:
    """``(folder, guest path)`` of one ``#+PREOPEN`` value, or ``InvalidArgs`` saying what is wrong."""
    parts = value.split()
    if not parts or len(parts) > 2:
        raise InvalidArgs(f"#+PREOPEN: {value!r}: write '<folder> [<guest path>]', "
                          "e.g. '#+PREOPEN: data /data'")
    folder = parts[0].strip("/") or "."
    guest = parts[1] if len(parts) == 2 else "/" + folder
    return folder, _guest(value, guest, "PREOPEN")


def parse_all(value: str | None) -> list[tuple[str, str]]:
    """Every ``#+PREOPEN`` of a manifest (the keyword's values, one a line), checked
    together: at most :data:`MAX_PREOPENS`, no guest path twice."""
    entries = [parse(line) for line in (value or "").splitlines() if line.strip()]
    if len(entries) > MAX_PREOPENS:
        raise InvalidArgs(f"#+PREOPEN: {len(entries)} folders; at most {MAX_PREOPENS}")
    seen: dict[str, str] = {}
    for folder, guest in entries:
        if guest in seen:
            raise InvalidArgs(f"#+PREOPEN: guest path {guest} is given twice "
                              f"({seen[guest]!r} and {folder!r})")
        seen[guest] = folder
    return entries


def parse_scratch(value: str | None, preopened: Sequence[str] = ()) -> dict[str, Any] | None:
    """``{guest, bytes}`` of a ``#+SCRATCH`` value (``None`` without one); its guest path may
    not be one a ``#+PREOPEN`` already takes."""
    if not value or not value.strip():
        return None
    parts = value.split()
    if len(parts) > 2:
        raise InvalidArgs(f"#+SCRATCH: {value!r}: write '<guest path> [<size>]', e.g. '#+SCRATCH: /tmp 16M'")
    guest = _guest(value, parts[0], "SCRATCH")
    if guest == "/":
        raise InvalidArgs(f"#+SCRATCH: {value!r}: the scratch folder cannot be the guest's root; e.g. /tmp")
    if guest in preopened:
        raise InvalidArgs(f"#+SCRATCH: {value!r}: {guest} is already a #+PREOPEN guest path")
    size = SCRATCH_DEFAULT
    if len(parts) == 2:
        m = _SIZE_RE.match(parts[1])
        if not m:
            raise InvalidArgs(f"#+SCRATCH: {value!r}: size {parts[1]!r} is not a byte count "
                              "like 64K, 16M or 1G")
        size = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
        if not 0 < size <= SCRATCH_MAX:
            raise InvalidArgs(f"#+SCRATCH: {value!r}: size must be within 1 byte and {SCRATCH_MAX >> 20} MiB")
    return {"guest": guest, "bytes": size}


def resolve_all(options: Mapping[str, Any], home: Path) -> tuple[tuple[str, str], ...]:
    """``(host folder, guest path)`` of every preopen of a call: the stored trees the build
    recorded, in ``home``'s tree store (``()`` when the entry records none). An entry from
    before the store (it names a live folder) is refused with the fix."""
    spec = options.get(OPTION)
    if not spec:
        return ()
    if isinstance(spec, Mapping):  # recorded before a command could preopen several folders
        spec = [spec]
    if not isinstance(spec, Sequence) or isinstance(spec, (str, bytes)):
        raise InvalidArgs(f"registry entry option {OPTION!r} is malformed; rebuild the toolkit")

    out = []
    for one in spec:
        if not isinstance(one, Mapping):
            raise InvalidArgs(f"registry entry option {OPTION!r} is malformed; rebuild the toolkit")
        folder, guest = parse(f"{one.get('dir', '')} {one.get('guest', '')}")
        tree = one.get("tree")
        if not isinstance(tree, str):
            raise InvalidArgs(f"#+PREOPEN {folder!r}: the registry entry names no stored copy "
                              "(it was built before preopened data was kept in the store); "
                              "rebuild the toolkit (wbx toolkit build <id>)")
        try:
            host = tree_path(Path(home), tree)
        except (NotFound, InvalidArgs):
            raise NotFound(f"#+PREOPEN {folder!r}: the stored copy {tree[:12]}… is missing from {home}; "
                           "rebuild the toolkit (wbx toolkit build <id>)") from None
        out.append((str(host), guest))
    return tuple(out)


def resolve(options: Mapping[str, Any], home: Path) -> tuple[str, str] | None:
    """The first preopen of :func:`resolve_all` (``None``: none)."""
    found = resolve_all(options, home)
    return found[0] if found else None


def scratch_of(options: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(guest path, byte cap)`` of the entry's scratch folder, re-checked (``None``: none)."""
    spec = options.get(SCRATCH_OPTION)
    if not spec:
        return None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("bytes"), int):
        raise InvalidArgs(f"registry entry option {SCRATCH_OPTION!r} is malformed; rebuild the toolkit")
    checked = parse_scratch(f"{spec.get('guest', '')} {spec['bytes']}")
    assert checked is not None
    return checked["guest"], checked["bytes"]


def needs_dev(preopens: Sequence[tuple[str, str]]) -> bool:
    """Whether a call's guest gets the per-call ``/dev`` (it preopens ``/``)."""
    return any(guest == "/" for _, guest in preopens)
