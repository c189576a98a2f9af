"""What the installed distributions are, as one key: the entry-point cache and the plugin
index (``wbcore.plugins``, ``wbcore_runtime.plugins.index``) are valid while it is unchanged.

Its own module, importing neither pluggy nor logging: ``wbx run`` checks the plugin index
with it and loads no plugin.
"""

from __future__ import annotations
from wbcore_runtime.store.digest import sha256

#: A folder changed this recently may change again within its clock tick unseen: no cache.
RACY_SECONDS = 2.0


def installed_key() -> tuple[str, bool]:
    """What the installed distributions are: the interpreter, and every ``*.dist-info`` /
    ``*.egg-info`` folder on ``sys.path`` with its modification time. Installing,
    upgrading or removing a distribution (editable ones too) adds, renames, removes or
    rewrites one of them; the source folders themselves (the working folder, a script's
    folder) do not count, so editing a project does not rescan.

    Also says whether the key is *racy*: a metadata folder modified in the last
    :data:`RACY_SECONDS` could change again within the same timestamp tick (an install
    under way), so a scan made now is not cached (as git treats a racy index).
    """
    import os
    import sys
    import time

    h = sha256(f"{sys.executable}\0{sys.prefix}\0{sys.version}".encode())
    newest = 0
    for entry in sys.path:
        h.update(f"\0\0{entry}".encode())
        try:
            with os.scandir(entry or ".") as it:
                metas = sorted((e.name, e.stat().st_mtime_ns) for e in it
                               if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        for name, mtime in metas:
            newest = max(newest, mtime)
            h.update(f"\0{name}\0{mtime}".encode())
    return h.hexdigest(), time.time_ns() - newest < RACY_SECONDS * 1e9
