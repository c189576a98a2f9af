"""Parsed manifests kept between processes, keyed by each file's identity and times.

Parsing a manifest (Org, through orgparse) is most of what discovery costs: 1,000
toolkits took ~0.6 s of CPU per ``wbx`` command. This index, one JSON file per search
root under ``$WB_HOME/cache/manifests/``, maps each toolkit folder's manifest to the
:class:`~wbcore_runtime.toolkit.manifest.Manifest` it parsed to, keyed by the file's
(inode, size, mtime, ctime). Any write to the file moves its ctime (which no one can set
back), and a new file has a new inode, so an edited, replaced or touched manifest is
parsed again. A file changed in the last :data:`RACY_SECONDS` is parsed but not kept (a
second write within one timestamp tick would be invisible), as git treats a racy index.

The index holds data only (JSON, never pickle): a corrupt or foreign file is ignored and
rewritten. Manifests that fail to parse are never cached: their error is found anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

from wbcore_runtime.toolkit.manifest import Manifest
from wbcore_runtime.store.artifacts import atomic_write

FORMAT = 1
RACY_SECONDS = 2.0
FOLDER = "cache/manifests"
#: An index larger than this is not read (a root of tens of thousands of toolkits parses instead).
MAX_INDEX_BYTES = 64 << 20

Stamp = tuple[int, int, int, int]


def stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _encode(m: Manifest) -> dict[str, Any]:
    data = {name: getattr(m, name) for name in Manifest.__slots__}
    data["path"] = str(m.path)
    for name in ("keywords", "drawer", "lines"):
        data[name] = dict(data[name])
    return data


def _decode(data: dict[str, Any], path: Path) -> Manifest:
    data = dict(data)
    data["path"] = path
    data["caps"] = tuple(data["caps"])
    data["notes"] = tuple(data["notes"])
    data["sections"] = tuple(tuple(s) for s in data["sections"])
    for name in ("keywords", "drawer", "lines"):  # read-only, as the parser makes them
        data[name] = MappingProxyType(data[name])
    return Manifest(**data)


class ManifestCache:
    """The index of one search root (``real``: its symlink-free path)."""

    def __init__(self, home: Path, real: str) -> None:
        name = hashlib.sha256(real.encode()).hexdigest()[:24]
        self.path = home / FOLDER / f"{name}.json"
        self.real = real
        self._old: dict[str, Any] = {}
        self._new: dict[str, Any] = {}
        self._dirty = False
        try:
            if self.path.stat().st_size <= MAX_INDEX_BYTES:
                data = json.loads(self.path.read_bytes())
                if (data.get("format") == FORMAT and data.get("root") == real
                        and isinstance(data.get("entries"), dict)):
                    self._old = data["entries"]
        except (OSError, ValueError, AttributeError):
            pass

    def get(self, name: str, shown: Path, st: os.stat_result) -> Manifest | None:
        """The manifest parsed from this very file before, or ``None``."""
        entry = self._old.get(name)
        if entry is None or entry.get("stamp") != list(stamp(st)):
            return None
        try:
            m = _decode(entry["manifest"], shown)
        except (KeyError, TypeError, ValueError):
            return None
        self._new[name] = entry
        return m

    def put(self, name: str, st: os.stat_result, m: Manifest) -> None:
        self._dirty = True
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_SECONDS * 1e9:
            return
        self._new[name] = {"stamp": list(stamp(st)), "manifest": _encode(m)}

    def save(self) -> None:
        """Write the index when it changed (an entry parsed, added or gone); errors ignored:
        the index is an optimisation, a read-only home still discovers."""
        if not self._dirty and self._new.keys() == self._old.keys():
            return

        body = json.dumps({"format": FORMAT, "root": self.real, "entries": self._new}, separators=(",", ":"))
        try:
            atomic_write(self.path, body.encode(), tmp_dir=self.path.parent.parent)
        except OSError:
            pass
