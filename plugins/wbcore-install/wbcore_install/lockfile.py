"""``wbx.lock``: one entry per installed toolkit (``contract.installs.LockEntry``: id, version,
pinned source, content digest per ``trust.signing``, trust, signer); written by
``wbcore_install.journal.land``, read by ``wbcore_install.install``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract.installs import LockEntry

LOCKFILE = "wbx.lock"
LOCK_FORMAT = 1

__all__ = ["LOCKFILE", "LOCK_FORMAT", "LockEntry", "lock_bytes", "read_lock"]



def read_lock(path: Path) -> dict[str, LockEntry]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(raw)
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {LOCK_FORMAT}")
        return {tid: LockEntry(id=tid, **{k: v for k, v in e.items() if k != "id"})
                for tid, e in data["toolkits"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidArgs(f"{path} is not a wbx lockfile ({exc})") from None


def lock_bytes(entries: Mapping[str, LockEntry]) -> bytes:
    data = {"format": LOCK_FORMAT, "toolkits": {tid: entries[tid].as_dict() for tid in sorted(entries)}}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
