"""store.locks.held: a lock file's wait is bounded while it waits, and says what it waits for."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from wbcore_runtime.contract.errors import InvalidArgs, Timeout
from wbcore_runtime.store import locks


def test_a_held_lock_ends_the_wait_at_its_bound_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with locks.held(path, what="pull", wait_s=1):
        # another holder (flock is per open file, so a second open conflicts as another process would)
        t0 = time.monotonic()
        with pytest.raises(Timeout, match=r"pull: .*x\.lock is still held by another process after 0\.3 s"):
            with locks.held(path, what="pull", wait_s=0.3):
                pass
        assert time.monotonic() - t0 < 3
    with locks.held(path, what="pull", wait_s=0.3):  # released: taken at once
        pass


def test_the_lock_is_taken_as_soon_as_the_holder_lets_go(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "x.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.2, os.close, (fd,)).start()
    t0 = time.monotonic()
    with locks.held(path, what="pull", wait_s=10):
        assert time.monotonic() - t0 < 5


def test_a_fifo_or_a_link_at_the_locks_name_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgs, match="not a regular file"):
        with locks.held(fifo, what="pull", wait_s=1):
            pass
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "link.lock").symlink_to(target)
    with pytest.raises(InvalidArgs, match="cannot open the lock"):
        with locks.held(tmp_path / "link.lock", what="pull", wait_s=1):
            pass
    assert target.read_text() == "keep"
