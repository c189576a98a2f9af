"""The home's change counter: one 8-byte file every writer of call-relevant state bumps.

A resolved call (``wbcore_runtime.dispatch.resolve``) is cached per process; it stays valid while this
counter is unchanged. Writers (the command registry, consent grants, installs) bump it under an
exclusive ``flock`` after their own write is durable, so a reader that sees the new value also
sees the new state.

Readers must survive the file, not only its contents: a counter that is *replaced* (a restore, an
editor's save, an atomic rename) or *truncated* must neither leave a reader serving a value from
the old file (stale kv values, missed revocations) nor kill it. So a reader keeps no mapping: each
:meth:`Generation.value` is one ``stat`` of the path (is it still the file we opened?) and one
``pread`` of the open descriptor (a short read is a truncation, never a ``SIGBUS``). A changed
identity re-opens; a counter that went backwards (truncated and bumped again, or rewound) moves a
per-reader offset so the values one reader returns never repeat an earlier state. Writers that
find the file short (new or truncated) seed it from the clock (microseconds), so a counter that
starts over starts above every value the old file held.

A missing file reads as 0 (a home nothing has been registered in yet; the registry and the Dock
create it when they open); an unreadable or short one reads as a fresh value every time, so
nothing is ever cached against it.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import struct
import threading
import time
from pathlib import Path

FILE = "generation"
_SIZE = 8
_fresh = itertools.count(1 << 62)  # distinct values for an unreadable counter: never a cache hit
_unpack = struct.Struct("<Q").unpack_from


def _seed() -> int:
    """The first value of a counter that starts over: the clock in microseconds, above any value
    an earlier file reached unless it took more than a million writes a second."""
    return time.time_ns() // 1000


class Generation:
    """The counter in ``folder/name``: the home's (``generation``) unless named otherwise —
    a store with a read cache of its own (the ``kv`` broker's) keeps its own counter, so its
    writes do not invalidate every resolved call."""

    def __init__(self, home: Path, name: str = FILE) -> None:
        self.path = home / name
        self._where = str(self.path)  # what every value() stats: no path conversion per call
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._offset = 0  # added to the file's value after a rewind (see value())
        self._last = -1  # the last value returned, to notice a counter that went backwards

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._ident = None

    def _open(self) -> int | None:
        """Open the path (under the lock); ``None`` when it is missing or unreadable."""
        self._close()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        st = os.fstat(fd)
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        return fd

    def value(self) -> int:
        with self._lock:
            fd = self._fd
            try:
                st = os.stat(self._where, follow_symlinks=False)
            except FileNotFoundError:
                self._close()
                return self._mark(0)  # a home nothing has been registered in yet
            except OSError:
                self._close()
                return next(_fresh)
            if fd is None or (st.st_dev, st.st_ino) != self._ident:
                fd = self._open()  # new, or replaced since we opened it: read the file there now
                if fd is None:
                    return next(_fresh)
            try:
                raw = os.pread(fd, _SIZE, 0)
            except OSError:
                self._close()
                return next(_fresh)
            if len(raw) < _SIZE:
                return next(_fresh)  # truncated: never a cache hit until a writer restores it
            return self._mark(_unpack(raw)[0])

    def _mark(self, counter: int) -> int:
        """The value to return for ``counter``: never below the last one returned, so a counter
        that went backwards (truncated and bumped, rewound) is never mistaken for an earlier state."""
        value = counter + self._offset
        if value < self._last:
            self._offset += self._last + 1 - value
            value = self._last + 1
        self._last = value
        return value

    @property
    def mapped(self) -> bool:
        """True once the counter file is open: only then does :meth:`value` see every other
        process's bumps at once."""
        with self._lock:
            if self._fd is None:
                self._open()
            return self._fd is not None

    def ensure(self) -> None:
        """Create the counter if it is missing, so readers find it from now on."""
        if self._fd is not None or self.path.exists():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < _SIZE:
                os.pwrite(fd, struct.pack("<Q", _seed()), 0)
                os.ftruncate(fd, _SIZE)
        finally:
            os.close(fd)

    def bump(self) -> int:
        """Advance the counter (call after the change is committed); returns the new value."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, _SIZE, 0)
            # A short file is new or was truncated: start over above anything it held.
            value = _unpack(raw)[0] + 1 if len(raw) == _SIZE else _seed()
            os.pwrite(fd, struct.pack("<Q", value), 0)
            if os.fstat(fd).st_size > _SIZE:
                os.ftruncate(fd, _SIZE)
            return value
        finally:
            os.close(fd)  # closing releases the flock


def bump(home: Path) -> int:
    return Generation(home).bump()
