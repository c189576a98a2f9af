"""One way to wait for a lock file in the home: bounded while it waits, and saying what it waits for.

A ``wbx`` suspended with Ctrl-Z (or stuck on a network) keeps its ``flock``; a blocking
``flock`` behind it waited for ever, silently. :func:`held` polls instead and ends the wait at
``wait_s`` with a ``Timeout`` naming the lock and what to do. The lock file is opened never
through a link and never blocking (a FIFO planted at its name would hang the open).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs, Timeout


@contextlib.contextmanager
def held(path: Path, *, what: str, wait_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made if absent) for the block, waited for at most ``wait_s``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise InvalidArgs(f"{what}: cannot open the lock {path} ({exc.strerror}); move it aside") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgs(f"{what}: the lock {path} is not a regular file; move it aside")
        deadline, pause = time.monotonic() + wait_s, 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Timeout(f"{what}: {path} is still held by another process after {wait_s:g} s "
                                  "(a wbx suspended with Ctrl-Z holds it too: resume or end it), then "
                                  "try again") from None
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.25)
        yield
    finally:
        os.close(fd)  # closing releases the flock
