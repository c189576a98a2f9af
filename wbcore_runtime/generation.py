"""The home's change counter: one 8-byte file every writer of call-relevant state bumps.

A resolved call (``wbcore_runtime.dispatch``) is cached per process; it stays valid while this
counter is unchanged. Readers map the file read-only, so checking it is a memory read,
not a system call or a SQLite query. Writers (the command registry, consent grants,
installs) bump it under an exclusive ``flock`` after their own write is durable, so a
reader that sees the new value also sees the new state.

A missing file reads as 0 and is looked for again after 0.1 s (a home nothing has been
registered in yet; the registry and the Dock create it when they open); an unreadable one
reads as a fresh value every time, so nothing is ever cached against it.
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import struct
import threading
import time
from pathlib import Path

FILE = "generation"
_SIZE = 8
_fresh = itertools.count(1 << 62)
_unpack = struct.Struct("<Q").unpack_from
#: How long a missing counter file reads as 0 before it is looked for again: a reader in a
#: home nothing has written to yet does not pay an open() per call.
_RETRY_MISSING_S = 0.1  # distinct values for an unreadable counter: never a cache hit


class Generation:
    """The counter in ``folder/name``: the home's (``generation``) unless named otherwise —
    a store with a read cache of its own (the ``kv`` broker's) keeps its own counter, so its
    writes do not invalidate every resolved call."""

    def __init__(self, home: Path, name: str = FILE) -> None:
        self.path = home / name
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()
        self._missing_until = 0.0

    def _open(self) -> mmap.mmap | None:
        with self._lock:
            if self._map is None:
                try:
                    fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                except OSError:
                    return None
                try:
                    if os.fstat(fd).st_size < _SIZE:
                        return None
                    self._map = mmap.mmap(fd, _SIZE, prot=mmap.PROT_READ)
                finally:
                    os.close(fd)
            return self._map

    def value(self) -> int:
        m = self._map
        if m is None:
            now = time.monotonic()
            if now < self._missing_until:
                return 0  # looked for it a moment ago (a home nothing has written to yet)
            m = self._open()
            if m is None:
                if self.path.exists():
                    return next(_fresh)
                self._missing_until = now + _RETRY_MISSING_S
                return 0
        return _unpack(m)[0]

    @property
    def mapped(self) -> bool:
        """True once the counter file is mapped: only then does :meth:`value` see every
        other process's bumps at once (a missing file reads as 0 for a moment)."""
        if self._map is None:
            self._open()
        return self._map is not None

    def ensure(self) -> None:
        """Create the counter (at 0) if it is missing, so readers map it from now on."""
        if self._map is not None or self.path.exists():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
        finally:
            os.close(fd)
        self._missing_until = 0.0

    def bump(self) -> int:
        """Advance the counter (call after the change is committed); returns the new value."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            with mmap.mmap(fd, _SIZE) as m:
                value = struct.unpack_from("<Q", m)[0] + 1
                struct.pack_into("<Q", m, 0, value)
            self._missing_until = 0.0
            return value
        finally:
            os.close(fd)  # closing releases the flock


def bump(home: Path) -> int:
    return Generation(home).bump()
