"""``wbx engine serve`` and ``wbx mcp serve --http`` bind before they say they serve: on a busy
port they print no "serving on …" line, say which port is busy and what to do (``--port``), and
exit 2 (invalid args) — they used to print "serving on …" and then exit 3. ``--port 0`` takes a
free port and the line names the port really bound."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

TOKEN = "docs-test-token-0123456789"
SURFACES = {
    "engine": ["engine", "serve", "--token", TOKEN],
    "mcp": ["mcp", "serve", "--http"],
}


def _env(tmp_path: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")}, "WB_HOME": str(tmp_path / "home")}


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other socket of this test listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_busy_port_is_refused_before_serving(surface: str, busy_port: int, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "wbcore_runtime", *SURFACES[surface], "--port", str(busy_port)],
                          env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "serving" not in said, said
    assert f"port {busy_port} on 127.0.0.1 is busy" in done.stderr and "--port" in done.stderr, said
    assert done.stderr.startswith("wbx: invalid-args: ") and len(done.stderr.strip().splitlines()) == 1, said


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_port_0_serves_on_the_port_it_names(surface: str, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "wbcore_runtime", *SURFACES[surface], "--port", "0"],
                            env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        line = ""
        assert proc.stderr is not None
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"exited {proc.returncode} before serving")
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        assert port != 0
        try:  # no token sent: refused, which proves the server on that port answers
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
            status = 200
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status in (401, 404, 421), status
    finally:
        proc.terminate()
        proc.wait(timeout=30)
