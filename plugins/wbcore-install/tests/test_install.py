"""``wbx toolkit install``: sources, verification before landing, safe unpack, wbx.lock, --locked."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from wbcore_install import install, lockfile
from wbcore_runtime.trust import signing
from wbcore_testing.fixtures import write_toolkit

SEED0 = base64.b64encode(bytes(32)).decode()


def snapshot(home: Path) -> dict[str, object]:
    """Every byte of the user root and the lockfile (links by target)."""
    out: dict[str, object] = {}
    root = home / "toolkits"
    if root.exists():
        for dirpath, dirnames, filenames in os.walk(root):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                rel = p.relative_to(home).as_posix()
                if p.is_symlink():
                    out[rel] = ("link", os.readlink(p))
                elif p.is_file():
                    out[rel] = p.read_bytes()
                else:
                    out[rel] = "dir"
    lock = home / lockfile.LOCKFILE
    out["LOCK"] = lock.read_bytes() if lock.exists() else None
    return out


@pytest.fixture
def src(tmp_path, monkeypatch):
    """A folder holding a signed third-party toolkit 'tp' and a first-party 'fp'."""
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    from wbcore_runtime.trust import identity

    base = tmp_path / "src"
    write_toolkit(base, "tp", trust="third-party", caps="net", files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(base / "tp", identity.Identity.from_seed(bytes(32)))
    write_toolkit(base, "fp", caps="vfs")
    return base


# --- git ------------------------------------------------------------------------------


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(src, tmp_path):
    r = tmp_path / "repo"
    shutil.copytree(src / "tp", r)
    _git("init", "-q", "-b", "main", cwd=r)
    _git("add", "-A", cwd=r)
    _git("commit", "-q", "-m", "v1", cwd=r)
    return r


# --- archives -------------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *a, **kw: _Quiet(*a, directory=str(site), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def _tar_of(folder: Path, out: Path, prefix: str) -> str:
    with tarfile.open(out, "w:gz") as tf:
        tf.add(folder, arcname=prefix)
    return hashlib.sha256(out.read_bytes()).hexdigest()


# --- --locked -------------------------------------------------------------------------


def test_parallel_installs_keep_one_consistent_lock(src, wb_home):
    from concurrent.futures import ThreadPoolExecutor

    env = {"WB_SIGNING_KEY": SEED0}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: install.install(wb_home, str(src / p), env=env), ["tp", "fp"]))
    lock = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]
    assert sorted(lock) == ["fp", "tp"]


def test_plain_git_urls_are_git_sources():
    src = install.parse_source("https://example.invalid/tk.git@" + "a" * 40)
    assert (src.kind, src.location, src.commit) == ("git", "https://example.invalid/tk.git", "a" * 40)
    with pytest.raises(Exception, match="pin a commit"):
        install.parse_source("https://example.invalid/tk.git")
