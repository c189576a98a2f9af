"""``wbx engine serve --port 0`` and ``wbx mcp serve --http --port 0`` take a free port and
their "serving on" line names the port really bound (it read ``:0``), so a script can use it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SURFACES = {
    "engine": ["engine", "serve", "--token", "docs-test-token-0123456789"],
    "mcp": ["mcp", "serve", "--http"],
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_port_0_serves_on_the_port_it_names(surface: str, tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")},
           "WB_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "wbcore_runtime", *SURFACES[surface], "--port", "0"],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr is not None
        deadline, line = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"exited {proc.returncode} before serving")
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found and int(found.group(1)) != 0, line
        try:  # no token sent: refused, which shows the server on that port answers
            urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/", timeout=30)
            status = 200
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status in (401, 404, 421), status
    finally:
        proc.terminate()
        proc.wait(timeout=30)
