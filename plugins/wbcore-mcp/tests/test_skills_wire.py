"""The skills extension is declared under ``capabilities.extensions`` on the wire for every
protocol version, 2025-11-25 included (the SDK's 2025-11-25 schema drops that field; the
official MCP Inspector 2.x looks for it there and nowhere else), and under ``experimental``
for older clients. Checked on the raw stdio bytes of ``wbx mcp serve``, not through a client
library that would drop the field again."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wbcore_testing.fixtures import write_toolkit

SKILLS = "io.modelcontextprotocol/skills"


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_initialize_declares_the_skills_extension_on_the_wire(tmp_path: Path, version: str) -> None:
    root = tmp_path / "tk"
    write_toolkit(root, "notes-kit", skills={"overview": "#+TITLE: Notes\nHow to keep notes.\n"})
    env = {"WB_HOME": str(tmp_path / "home"), "WB_TOOLKITS_ROOT": str(root),
           "PATH": os.environ.get("PATH", "")}
    wbx = str(Path(sys.executable).with_name("wbx"))
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "skills/list", "params": {}}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    feed = "".join(json.dumps(m) + "\n" for m in (init, note, listed)).encode()
    proc = subprocess.Popen([wbx, "mcp", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    replies: dict[int, dict] = {}
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(feed)
        proc.stdin.flush()  # stdin stays open: at EOF the server ends and drops what is in flight
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            end = time.monotonic() + 120
            while (2 not in replies and time.monotonic() < end
                   and sel.select(max(0.0, end - time.monotonic()))):
                line = proc.stdout.readline()
                if not line:
                    break
                reply = json.loads(line)
                if "id" in reply:
                    replies[reply["id"]] = reply
    finally:
        proc.kill()
        proc.wait(10)
    caps = replies[1]["result"]["capabilities"]
    assert replies[1]["result"]["protocolVersion"] == version
    assert caps["extensions"][SKILLS] == {} and caps["experimental"][SKILLS] == {}, caps
    names = [s["frontmatter"]["name"] for s in replies[2]["result"]["skills"]]
    assert "notes-kit" in names, replies[2]
