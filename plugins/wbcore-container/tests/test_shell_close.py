"""Ending a shell container whose agent reads nothing: no bubblewrap needed (the container's
process is a stand-in that never reads its stdin, as a stuck or hostile agent would)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from wbcore_runtime.wire import frames

from wbcore_container import bwrap
from wbcore_container.shell import ContainerShell


def test_close_ends_a_container_whose_agent_reads_nothing() -> None:
    """Its stdin pipe full (keystrokes it never took), the Shutdown frame cannot be written:
    ``close`` must still end the container instead of blocking in that write for ever."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, start_new_session=True)
    info_r, info_w = os.pipe()
    os.close(info_w)
    shell = ContainerShell(bwrap.Running(proc, info_r), frames.new_secret(), 0.0)
    os.set_blocking(shell.channel.write_fd, False)
    try:
        while True:
            os.write(shell.channel.write_fd, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(shell.channel.write_fd, True)
    done = threading.Thread(target=shell.close, daemon=True)
    done.start()
    done.join(timeout=10)
    try:
        assert not done.is_alive(), "close blocked writing Shutdown to an agent that reads nothing"
        assert proc.poll() is not None
    finally:
        if proc.poll() is None:
            proc.kill()  # lets a close still blocked in its write return
            done.join(timeout=5)
