"""A real SIGKILL of a child process mid-write leaves kv, queue and VFS old-or-new, never torn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from wbcore_runtime.contract.calls import Principal

SIZE = 300_000  # large enough that a write spans many pages

CHILD = textwrap.dedent(f"""
    import sys
    from wbcore_runtime.runtime import Runtime
    from wbcore_runtime.contract.calls import Principal
    rt = Runtime.open(plugins=["brokers-state"], home=sys.argv[1], env={{"WB_DOCK_RATE": "100000000/60"}})
    d = rt.dock
    c = d.context(principal=Principal("t", "w"), caps={{"kv", "queue", "vfs"}}, instance="killme")
    i = 0
    while True:
        i += 1
        fill = bytes([i % 251]) * {SIZE}
        d.call(c, "kv", "put", {{"key": "k", "value": fill}})
        d.call(c, "vfs", "write", {{"path": "f", "data": fill}})
        d.call(c, "queue", "push", {{"queue": "q", "message": fill[: 200_000]}})
        if d.call(c, "queue", "depth", {{"queue": "q"}})["depth"] > 20:
            d.call(c, "queue", "pop", {{"queue": "q"}})
        if i == 3:
            print("ready", flush=True)
""")


def _uniform(data: bytes, size: int) -> bool:
    return len(data) == size and data == data[:1] * size


def test_kill_mid_write_never_tears(make_runtime, wb_home, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, str(script), str(wb_home)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.07 * round_)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        rt = make_runtime(plugins=["brokers-state"])
        c = rt.dock.context(principal=Principal("t", "check"), caps={"kv", "queue", "vfs"}, instance="killme")
        assert _uniform(rt.dock.call(c, "kv", "get", {"key": "k"})["value"], SIZE)
        assert _uniform(rt.dock.call(c, "vfs", "read", {"path": "f"})["data"], SIZE)
        depth = rt.dock.call(c, "queue", "depth", {"queue": "q"})["depth"]
        assert depth >= 1
        rows = rt.dock.driver("queue").db.conn.execute("SELECT body FROM messages").fetchall()
        assert len(rows) == depth and all(_uniform(r[0], 200_000) for r in rows)
