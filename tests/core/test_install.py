"""``wbx toolkit install``: sources, verification before landing, safe unpack, wbx.lock, --locked."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from wbcore_runtime.store import install, lockfile
from wbcore_runtime.trust import signing
from wbcore_runtime.guard import unpack
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


def _evil_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


MANIFEST = b"#+TITLE: e\n#+TOOLKIT: e\n#+VERSION: 0.1.0\n#+STATUS: stable\n#+TAGLINE: e.\n\n* e :toolkit:\n"


def test_zip_traversal_and_symlinks_are_refused(tmp_path):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("e/manifest.org", MANIFEST)
        zf.writestr("../evil.txt", b"x")
    with pytest.raises(unpack.UnsafeArchive, match="climbs out"):
        unpack.unpack(z, tmp_path / "out1")
    z2 = tmp_path / "link.zip"
    with zipfile.ZipFile(z2, "w") as zf:
        info = zipfile.ZipInfo("e/link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "../../outside")
    with pytest.raises(unpack.UnsafeArchive, match="escapes"):
        unpack.unpack(z2, tmp_path / "out2")


def test_caps_on_files_and_bytes(tmp_path):
    many = _evil_tar(tmp_path / "many.tar.gz", [(_info(f"e/f{i}"), b"x") for i in range(20)])
    with pytest.raises(unpack.UnsafeArchive, match="more than 10 entries"):
        unpack.unpack(many, tmp_path / "o1", unpack.Caps(max_files=10))
    # compresses to almost nothing
    big = _evil_tar(tmp_path / "big.tar.gz", [(_info("e/big"), b"\0" * 200_000)])
    with pytest.raises(unpack.UnsafeArchive, match="over the cap|more than 100000 bytes"):
        unpack.unpack(big, tmp_path / "o2", unpack.Caps(max_bytes=100_000))


# --- --locked -------------------------------------------------------------------------


def test_parallel_installs_keep_one_consistent_lock(src, wb_home):
    from concurrent.futures import ThreadPoolExecutor

    env = {"WB_SIGNING_KEY": SEED0}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: install.install(wb_home, str(src / p), env=env), ["tp", "fp"]))
    lock = json.loads((wb_home / "wbx.lock").read_text())["toolkits"]
    assert sorted(lock) == ["fp", "tp"]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab./\\\\:\x00 ", min_size=1, max_size=24))
def test_safe_names_never_escape(name):
    try:
        rel = unpack.safe_name(name, "fuzz")
    except unpack.UnsafeArchive:
        return
    assert not rel.startswith("/") and ".." not in rel.split("/") and "\x00" not in rel
    assert rel == "" or ("" not in rel.split("/") and "." not in rel.split("/"))  # "" = the root itself


def test_plain_git_urls_are_git_sources():
    src = install.parse_source("https://example.invalid/tk.git@" + "a" * 40)
    assert (src.kind, src.location, src.commit) == ("git", "https://example.invalid/tk.git", "a" * 40)
    with pytest.raises(Exception, match="pin a commit"):
        install.parse_source("https://example.invalid/tk.git")


