"""Deterministic archives: the same files always give the same ``.tar.gz`` bytes.

What ``wbx toolkit push`` uploads, an agent's promotion bundle and an Agent Skills export
index all pack with :func:`deterministic_targz`, so a digest over an archive is a digest over
its files.
"""

from __future__ import annotations

import gzip
import io
import tarfile


def deterministic_targz(name: str, files: dict[str, bytes]) -> bytes:
    """The same files always give the same bytes (sorted, mtime 0, owner 0, fixed modes)."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for rel in sorted(files):
                data = files[rel]
                info = tarfile.TarInfo(f"{name}/{rel}")
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tf.addfile(info, io.BytesIO(data))
    return raw.getvalue()
