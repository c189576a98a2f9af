"""archive: and git+ sources built end to end by the c lane (loopback HTTP, a local bare repo)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("wbcore_sources")

MAIN_C = '#include <stdio.h>\nint main(void){ puts("%s"); return 0; }\n'


@pytest.fixture
def rt(make_runtime, zig_cache: Path):
    return make_runtime(env={"WB_ZIG_CACHE": str(zig_cache), "WB_SOURCES_ALLOW_PRIVATE": "1",
                             "PATH": os.environ.get("PATH", "")})


def test_archive_of_c_source_is_built_and_run(rt, wbx, make_toolkit, file_server) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = (MAIN_C % "from an archive").encode()
        info = tarfile.TarInfo("pkg/main.c")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    body = buf.getvalue()
    file_server.files["/src.tgz"] = body
    make_toolkit("fromtar", exec="command", drawer={"CLI_BIN": "fromtar"},
                 extra={"BUILD_SRC": f"archive:{file_server.url}/src.tgz", "BUILD_LANG": "c",
                        "CLI_BIN": "fromtar", "SHA256": hashlib.sha256(body).hexdigest()})
    res = wbx("toolkit", "build", "fromtar", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert rt.call("fromtar").stdout == b"from an archive\n"


def test_git_pinned_commit_is_built_and_run(rt, wbx, make_toolkit, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}

    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    work = tmp_path / "work"
    (work / "tool").mkdir(parents=True)
    (work / "tool" / "main.c").write_text(MAIN_C % "pinned commit")
    git("init", "-q", "-b", "main", ".", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    (work / "tool" / "main.c").write_text(MAIN_C % "a later commit")
    git("commit", "-q", "-am", "two", cwd=work)
    bare = tmp_path / "repo.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    make_toolkit("fromgit", exec="command", drawer={"CLI_BIN": "fromgit"},
                 extra={"BUILD_SRC": f"git+file://{bare}@{commit}#tool", "BUILD_LANG": "c",
                        "CLI_BIN": "fromgit"})
    res = wbx("toolkit", "build", "fromgit", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert rt.call("fromgit").stdout == b"pinned commit\n"


def test_prebuilt_archive_bundle_registers_its_module(make_runtime, wbx, make_toolkit, file_server) -> None:
    wasmtime = pytest.importorskip("wasmtime")
    module = wasmtime.wat2wasm('(module (memory (export "memory") 1) (func (export "_start")))')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in (("bundle/bin/tool.wasm", module), ("bundle/data/x.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    body = buf.getvalue()
    file_server.files["/b.tgz"] = body
    rt = make_runtime(env={"WB_SOURCES_ALLOW_PRIVATE": "1"})
    make_toolkit("bundled", exec="command", drawer={"CLI_BIN": "bundled"},
                 extra={"BUILD_SRC": f"archive:{file_server.url}/b.tgz", "CLI_BIN": "bundled",
                        "WASM_PATH": "bundle/bin/tool.wasm", "PREOPEN": "bundle/data",
                        "SHA256": hashlib.sha256(body).hexdigest()})
    res = wbx("toolkit", "build", "bundled", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert hashlib.sha256(module).hexdigest() in res.stdout
    assert rt.call("bundled").exit_code == 0
