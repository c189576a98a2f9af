"""``wbx mcp serve`` whose stdin is a regular file or /dev/null (a script, a client that closed
it, ``< /dev/null`` in an example): it answers what the file holds and exits 0 at its end.
uvloop's pipe transport aborted the process on such a stdin (SIGABRT, exit 134)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}


def _serve(stdin: object, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")}, "WB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "wbcore_runtime", "mcp", "serve"], stdin=stdin, env=env,
                          cwd=home.parent, capture_output=True, timeout=120, check=False)


def test_stdin_from_a_regular_file_is_answered_and_ends_cleanly(tmp_path: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(INIT) + "\n", encoding="utf-8")
    with lines.open("rb") as f:
        done = _serve(f, tmp_path / "home")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    reply = json.loads(done.stdout.splitlines()[0])
    assert reply["id"] == 1 and "capabilities" in reply["result"]


def test_stdin_from_dev_null_exits_0(tmp_path: Path) -> None:
    done = _serve(subprocess.DEVNULL, tmp_path / "home")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b""
