"""Build products in a source tree: refused by the lanes that could load them.

A source folder is what a person can read and review; a ``.pyc`` or an object file in it
is code nobody reviewed that a compiler would load instead of (or beside) the source.
Each lane that could load such a file calls :func:`refuse` with the names it would load
(python: ``__pycache__`` and ``*.pyc``; c/zig: ``*.o``, ``*.a``, ``*.so`` unless the
manifest declares them), and the build stops with an error naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs

#: What the python lane refuses: CPython would import the bytecode instead of the source.
PYTHON_PRODUCTS = (("__pycache__",), (".pyc", ".pyo"))
#: What the c/zig lanes refuse: a linker would take them as code.
NATIVE_PRODUCTS = ((), (".o", ".obj", ".a", ".so", ".lo", ".la", ".dylib"))


class BuildProductInSource(InvalidArgs):
    """A source tree carries a precompiled file the lane could load."""


def refuse(root: Path, *, lane: str, dirs: Iterable[str] = (), suffixes: Iterable[str] = (),
           declared: Iterable[str] = (), hint: str = "") -> None:
    """Raise :class:`BuildProductInSource` naming the first build product under ``root``:
    a folder named one of ``dirs`` or a file ending in one of ``suffixes`` (shared-object
    versions such as ``libx.so.1`` included), at any depth, unless its relative path is
    in ``declared``."""
    dirs, suffixes, allowed = frozenset(dirs), tuple(suffixes), frozenset(declared)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            rel = (here / name).relative_to(root).as_posix()
            if rel in allowed:
                continue
            bad = name in dirs and name in dirnames
            bad = bad or name.endswith(suffixes) or any(f"{s}." in name for s in suffixes if s == ".so")
            if bad:
                what = "folder" if name in dirnames else "file"
                if what == "folder":  # name the first file inside (the .pyc itself) when there is one
                    inner = _first_file(here / name)
                    if inner is not None:
                        what, rel = "file", f"{rel}/{inner}"
                raise BuildProductInSource(
                    f"{lane} lane: the source contains the build product {what} {rel!r}; a compiler could "
                    f"load it instead of the source. Remove it from the source folder{hint}")


def _first_file(folder: Path) -> str | None:
    """The first regular file under ``folder`` (relative to it), through the containment walk
    (links never followed); ``None`` when there is none or the folder cannot be walked."""
    if folder.is_symlink():  # os.walk lists a link to a folder among the folders: never walk it
        return None
    try:
        return next((n.rel for n in paths.walk(folder, label="the source folder") if n.kind == "file"), None)
    except paths.Refused:
        return None
