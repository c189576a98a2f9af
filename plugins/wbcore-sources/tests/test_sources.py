"""BUILD_SRC prefixes: fetched sources are pinned and checked before use; archives unpack safely."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from wbcore_runtime.plugins import sources
from wbcore_runtime.build import SourceRequest
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, WbError
from wbcore_runtime.toolkit.manifest import parse
from wbcore_testing.fixtures import FileServer, manifest_text

WASM = b"\0asm\x01\0\0\0"


def _redirect_to_metadata(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(302)
    handler.send_header("Location", "http://169.254.169.254/latest")
    handler.end_headers()


@pytest.fixture
def server(file_server: FileServer) -> FileServer:
    """The file server, and ``/redirect-to/...`` answers a redirect to a cloud metadata address."""
    file_server.routes["/redirect-to/"] = _redirect_to_metadata
    return file_server


@pytest.fixture
def rt(make_runtime):
    return make_runtime(env={"WB_ALLOW_PRIVATE_SOURCES": "1",
                             "PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def resolve(rt, tmp_path: Path, spec: str, **extra: str):
    kw = {"BUILD_SRC": spec, **extra}
    m = parse(manifest_text("demo", extra=kw), tmp_path / "tk" / "manifest.org")
    (tmp_path / "tk").mkdir(exist_ok=True)
    parsed = sources.parse(spec, rt.prefixes)
    driver = parsed.prefix.factory(rt)
    return driver.resolve(SourceRequest(manifest=m, rest=parsed.rest, workdir=tmp_path / "work",
                                        home=rt.home))


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def file_info(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def test_wasm_source_is_fetched_and_checked(rt, server: FileServer, tmp_path: Path) -> None:
    server.files["/m.wasm"] = WASM
    res = resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256=sha(WASM))
    assert res.artifact is not None and res.artifact.read_bytes() == WASM
    assert res.digest == sha(WASM)


def test_wrong_sha256_never_reaches_the_lane(rt, server: FileServer, tmp_path: Path) -> None:
    server.files["/m.wasm"] = WASM
    with pytest.raises(WbError, match="sha256 mismatch") as info:
        resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256="0" * 64)
    assert info.value.exit_code == 126  # docs/signing.md: a #+SHA256 mismatch is capability-denied
    assert not any(p.is_file() for p in (tmp_path / "work").rglob("*"))


def test_fetched_source_without_sha256_is_refused_before_fetching(rt, server: FileServer,
                                                                  tmp_path: Path) -> None:
    server.files["/m.wasm"] = WASM
    with pytest.raises(InvalidArgs, match="needs #\\+SHA256"):
        resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm")
    assert server.hits == []


def test_download_size_cap(make_runtime, server: FileServer, tmp_path: Path) -> None:
    rt = make_runtime(env={"WB_ALLOW_PRIVATE_SOURCES": "1", "WB_SOURCE_MAX_BYTES": "1000"})
    body = WASM + b"\0" * 5000
    server.files["/big.wasm"] = body
    with pytest.raises(InvalidArgs, match="cap"):
        resolve(rt, tmp_path, f"wasm:{server.url}/big.wasm", SHA256=sha(body))


def test_private_addresses_are_refused_by_default(make_runtime, server: FileServer, tmp_path: Path) -> None:
    rt = make_runtime(env={})
    server.files["/m.wasm"] = WASM
    with pytest.raises(CapabilityDenied, match="SSRF"):
        resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256=sha(WASM))
    assert server.hits == []


def test_redirects_are_rechecked(make_runtime, server: FileServer, tmp_path: Path) -> None:
    from wbcore_runtime.guard import fetch
    from wbcore_runtime.guard.netguard import NetGuard

    # Loopback is treated as public for the first hop only; the redirect to a link-local address is
    # re-checked.
    guard = NetGuard(public=frozenset({"127.0.0.1"}))
    with pytest.raises(CapabilityDenied, match="169.254.169.254"):
        fetch.download(f"{server.url}/redirect-to/x", tmp_path / "x", guard=guard)
    assert server.hits == ["/redirect-to/x"]
    assert not (tmp_path / "x").exists() and not (tmp_path / ".x.part").exists()


def test_private_hosts_allowlist(make_runtime, server: FileServer, tmp_path: Path) -> None:
    server.files["/m.wasm"] = WASM
    rt = make_runtime(env={"WB_ALLOW_PRIVATE_HOSTS": "10.0.0.0/8 127.0.0.1"})
    assert resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256=sha(WASM)).artifact.read_bytes() == WASM
    rt = make_runtime(env={"WB_ALLOW_PRIVATE_HOSTS": "mirror.internal"})
    with pytest.raises(CapabilityDenied, match="WB_ALLOW_PRIVATE_HOSTS"):
        resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256=sha(WASM))


def test_local_sources_relative_and_file_urls(rt, tmp_path: Path) -> None:
    tk = tmp_path / "tk"
    (tk / "bin").mkdir(parents=True)
    (tk / "bin" / "tool.wasm").write_bytes(WASM)
    res = resolve(rt, tmp_path, "wasm:bin/tool.wasm", SHA256=sha(WASM))
    assert res.artifact.read_bytes() == WASM and res.artifact.parent == tmp_path / "work"
    with pytest.raises(WbError, match="sha256 mismatch"):
        resolve(rt, tmp_path, "wasm:bin/tool.wasm", SHA256="0" * 64)
    with pytest.raises(InvalidArgs, match="needs #\\+SHA256"):
        resolve(rt, tmp_path, "wasm:bin/tool.wasm")
    with pytest.raises(InvalidArgs, match="escapes"):
        resolve(rt, tmp_path, "wasm:../outside.wasm", SHA256=sha(WASM))
    (tk / "bin" / "link.wasm").symlink_to("/etc/passwd")
    with pytest.raises(InvalidArgs, match="escapes|outside"):
        resolve(rt, tmp_path, "wasm:bin/link.wasm", SHA256=sha(WASM))
    with pytest.raises(InvalidArgs, match="not a regular file"):
        resolve(rt, tmp_path, "wasm:file:///dev/zero", SHA256=sha(WASM))
    other = tmp_path / "elsewhere.tgz"
    body = tar_bytes([(file_info("bin/tool.wasm"), WASM)])
    other.write_bytes(body)
    res = resolve(rt, tmp_path, f"archive:file://{other}", SHA256=sha(body), WASM_PATH="bin/tool.wasm")
    assert res.artifact.read_bytes() == WASM
    (tk / "b.tgz").write_bytes(body)
    res = resolve(rt, tmp_path, "archive:b.tgz", SHA256=sha(body))
    assert res.artifact.name == "tool.wasm"
    with pytest.raises(InvalidArgs, match="only https://"):
        resolve(rt, tmp_path, "wasm:ftp://example.com/x.wasm", SHA256=sha(WASM))


def test_archive_bundle_with_wasm_path_and_preopen(rt, server: FileServer, tmp_path: Path) -> None:
    body = tar_bytes([(file_info("bin/tool.wasm"), WASM), (file_info("data/words.txt"), b"a b c"),
                      (file_info("README"), b"hi")])
    server.files["/b.tgz"] = body
    res = resolve(rt, tmp_path, f"archive:{server.url}/b.tgz", SHA256=sha(body), WASM_PATH="bin/tool.wasm",
                  PREOPEN="data")
    assert res.artifact.read_bytes() == WASM
    assert (res.preopen / "words.txt").read_text() == "a b c"


def test_zip_archive_with_a_single_module(rt, server: FileServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x/tool.wasm", WASM)
    body = buf.getvalue()
    server.files["/b.zip"] = body
    res = resolve(rt, tmp_path, f"archive:{server.url}/b.zip", SHA256=sha(body))
    assert res.artifact.name == "tool.wasm"


@pytest.mark.parametrize("payload, match", [
    (b"#!/bin/sh\necho hi\n", "is not a WebAssembly binary"),
    (b"(module)", "WebAssembly text"),
    (b"\0asm\x02\x00\x00\x00", "unsupported version"),
])
def test_a_payload_that_is_not_webassembly_is_refused_at_build(rt, server: FileServer, tmp_path: Path,
                                                                 payload: bytes, match: str) -> None:
    """``archive:`` (found or named by #+WASM_PATH) and ``wasm:`` hand over only WebAssembly:
    a shell script named tool.wasm stops the build, not its first call."""
    body = tar_bytes([(file_info("bin/tool.wasm"), payload)])
    server.files["/b.tgz"] = body
    with pytest.raises(InvalidArgs, match=f"bin/tool.wasm in archive:.*{match}"):
        resolve(rt, tmp_path, f"archive:{server.url}/b.tgz", SHA256=sha(body))
    with pytest.raises(InvalidArgs, match=f"#\\+WASM_PATH 'bin/tool.wasm' in archive:.*{match}"):
        resolve(rt, tmp_path, f"archive:{server.url}/b.tgz", SHA256=sha(body), WASM_PATH="bin/tool.wasm")
    server.files["/m.wasm"] = payload
    with pytest.raises(InvalidArgs, match=f"wasm:.*{match}"):
        resolve(rt, tmp_path, f"wasm:{server.url}/m.wasm", SHA256=sha(payload))


@pytest.mark.parametrize(
    "members, match",
    [
        ([(file_info("../evil"), b"x")], "climbs out"),
        ([(file_info("/etc/evil"), b"x")], "absolute"),
        ([(special("link", tarfile.SYMTYPE, "../../etc"), None)], "escapes"),
        ([(special("link", tarfile.SYMTYPE, "/etc"), None)], "absolute"),
        ([(special("hard", tarfile.LNKTYPE, "x"), None)], "hard link"),
        ([(special("dev", tarfile.CHRTYPE), None)], "device"),
    ],
)
def test_hostile_archives_are_refused(rt, server: FileServer, tmp_path: Path, members, match) -> None:
    body = tar_bytes(members)
    server.files["/h.tgz"] = body
    with pytest.raises(InvalidArgs, match=match):
        resolve(rt, tmp_path, f"archive:{server.url}/h.tgz", SHA256=sha(body), WASM_PATH="x.wasm")
    assert not (tmp_path / "evil").exists()


def test_link_inside_then_write_through_it_cannot_escape(tmp_path: Path) -> None:
    from wbcore_runtime.guard.unpack import unpack

    link = file_info("sub")
    link.type = tarfile.SYMTYPE
    link.linkname = "."
    arch = tmp_path / "a.tgz"
    arch.write_bytes(tar_bytes([(link, None), (file_info("sub/sub/ok.txt"), b"fine")]))
    unpack(arch, tmp_path / "root")
    assert (tmp_path / "root" / "ok.txt").read_text() == "fine"


def test_archive_caps(tmp_path: Path) -> None:
    from wbcore_runtime.guard.unpack import Caps, unpack

    arch = tmp_path / "a.tgz"
    arch.write_bytes(tar_bytes([(file_info("zeros"), b"\0" * 100_000)]))  # compresses to almost nothing
    with pytest.raises(InvalidArgs, match="declares 100000 bytes, over the cap"):
        unpack(arch, tmp_path / "r1", Caps(max_bytes=1000))
    arch.write_bytes(tar_bytes([(file_info(f"f{i}"), b"x") for i in range(20)]))
    with pytest.raises(InvalidArgs, match="more than 10 entries"):
        unpack(arch, tmp_path / "r2", Caps(max_files=10))


def _git(*args: str, cwd: Path) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def bare_repo(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "work-repo"
    work.mkdir()
    _git("init", "-q", "-b", "main", ".", cwd=work)
    (work / "tool").mkdir()
    (work / "tool" / "main.c").write_text("int main(void){return 0;}\n")
    hooks = work / ".githooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {tmp_path}/HOOK_RAN\n")
    (hooks / "post-checkout").chmod(0o755)
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    (work / "tool" / "main.c").write_text("int main(void){return 1;}\n")
    _git("commit", "-q", "-am", "two", cwd=work)
    bare = tmp_path / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    _git("config", "core.hooksPath", str(hooks), cwd=bare)
    return bare, commit


def test_git_pinned_commit_is_checked_out(rt, bare_repo, tmp_path: Path) -> None:
    bare, commit = bare_repo
    res = resolve(rt, tmp_path, f"git+file://{bare}@{commit}#tool")
    assert (res.dir / "main.c").read_text() == "int main(void){return 0;}\n"  # the pinned one, not the tip
    assert not (tmp_path / "HOOK_RAN").exists()
    assert not (res.dir.parent / ".git").exists()


def test_git_without_a_pin_is_refused(rt, bare_repo, tmp_path: Path) -> None:
    bare, _ = bare_repo
    for spec in (f"git+file://{bare}", f"git+file://{bare}@main", f"git+file://{bare}@abc123"):
        with pytest.raises(InvalidArgs, match="pin|pinned"):
            resolve(rt, tmp_path, spec)


def test_git_refuses_other_transports(rt, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgs, match="only https://"):
        resolve(rt, tmp_path, "git+ext::sh -c touch% /tmp/pwned@" + "a" * 40)


def test_git_unknown_commit(rt, bare_repo, tmp_path: Path) -> None:
    bare, _ = bare_repo
    with pytest.raises(NotFound):
        resolve(rt, tmp_path, f"git+file://{bare}@{'1' * 40}")


def test_script_is_refused_and_unknown_prefixes_list_known(rt, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgs, match="refused") as refused:
        sources.parse("script:build.sh", rt.prefixes)
    # The message says why and what to do, in the user's words (no internal reference).
    assert "use path: with a BUILD_LANG lane" in str(refused.value) and "wb-" not in str(refused.value)
    with pytest.raises(InvalidArgs,
                       match="known: archive:, crate:, git\\+, gobuild:, path:, script:, wasm:, zigbuild:"):
        sources.parse("svn:repo", rt.prefixes)


def test_crate_from_a_local_directory_source(make_runtime, tmp_path: Path) -> None:
    crates = tmp_path / "crates"
    for ver in ("1.2.0", "1.10.0"):
        (crates / f"itoa-{ver}" / "src").mkdir(parents=True)
        (crates / f"itoa-{ver}" / "Cargo.toml").write_text(f'[package]\nname = "itoa"\nversion = "{ver}"\n')
    rt = make_runtime(env={"WB_CRATE_DIRS": str(crates)})
    assert resolve(rt, tmp_path, "crate:itoa").dir.name == "itoa-1.10.0"
    assert resolve(rt, tmp_path, "crate:itoa@1.2.0").dir.name == "itoa-1.2.0"
    with pytest.raises(NotFound, match="not in the local crate sources.*librust-nosuch-dev"):
        resolve(rt, tmp_path, "crate:nosuch")
    with pytest.raises(InvalidArgs):
        resolve(rt, tmp_path, "crate:../../etc")


def test_gobuild_and_zigbuild_resolve_to_the_toolkit_and_an_entry(rt, tmp_path: Path) -> None:
    tk = tmp_path / "tk"
    (tk / "cmd" / "tool").mkdir(parents=True)
    (tk / "src").mkdir()
    (tk / "src" / "main.zig").write_text("pub fn main() void {}\n")
    res = resolve(rt, tmp_path, "gobuild:./cmd/tool")
    assert res.dir == tk and res.entry == "cmd/tool"
    res = resolve(rt, tmp_path, "zigbuild:src/main.zig")
    assert res.dir == tk and res.entry == "src/main.zig"
    with pytest.raises(InvalidArgs, match="escapes"):
        resolve(rt, tmp_path, "zigbuild:../../x")


def test_path_source_reads_stay_inside_the_toolkit(rt, tmp_path: Path) -> None:
    """path: goes through wbcore_runtime.guard.paths: a folder linked out, a file linked out and a hard link
    are refused with `file: reason`; a link that stays inside is followed."""
    from wbcore_runtime.guard import paths

    tk = tmp_path / "tk"
    (tk / "src").mkdir(parents=True)
    (tk / "src" / "main.c").write_text("int main(void){return 0;}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host.c").write_text("secret\n")
    os.symlink(outside, tk / "out")
    os.symlink(outside / "host.c", tk / "host.c")
    os.link(outside / "host.c", tk / "src" / "hard.c")
    os.symlink("src", tk / "alias")
    with pytest.raises(paths.Refused, match=r"tk/out: symlink to a path outside the toolkit root"):
        resolve(rt, tmp_path, "path:out")
    with pytest.raises(paths.Refused, match=r"tk/host.c: symlink to a path outside the toolkit root"):
        resolve(rt, tmp_path, "path:host.c")
    with pytest.raises(paths.Refused, match=r"hard.c: has 2 hard links"):
        resolve(rt, tmp_path, "path:src/hard.c")
    with pytest.raises(paths.Refused, match=r"hard.c: has 2 hard links"):
        resolve(rt, tmp_path, "path:src")  # the source digest reads every file through containment
    (tk / "src" / "hard.c").unlink()
    assert resolve(rt, tmp_path, "path:alias").dir == (tk / "src").resolve()
    with pytest.raises(InvalidArgs, match="escapes"):
        resolve(rt, tmp_path, "path:../outside")
