"""The one git fetcher (``wbcore_runtime.guard.gitfetch``): the SSRF guard, the pin, the transports,
the bounds — against git's own smart-HTTP server on loopback."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from wbcore_runtime.guard import gitfetch
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.guard.netguard import EgressDenied, NetGuard
from wbcore_testing.fixtures import GitHttpServer, git_repo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(git_server: GitHttpServer) -> tuple[GitHttpServer, str]:
    _, commit = git_repo(git_server.root / "tk.git", {"tool/main.c": "int main(void){return 0;}\n"},
                         commits=2)
    return git_server, commit


def test_loopback_is_refused_naming_the_settings_then_allowed_by_each(served, tmp_path: Path) -> None:
    server, commit = served
    url = f"{server.url}/tk.git"
    with pytest.raises(EgressDenied,
                       match="127.0.0.1 is loopback.*WB_ALLOW_PRIVATE_HOSTS.*WB_ALLOW_PRIVATE_SOURCES"):
        gitfetch.checkout(url, tmp_path / "a", commit=commit, guard=NetGuard.from_env({}))
    assert server.hits == []  # refused before git ran
    for env in ({"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.1"}, {"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.0/8"},
                {"WB_ALLOW_PRIVATE_SOURCES": "1"}):
        got = gitfetch.checkout(url, tmp_path / "b", commit=commit, guard=NetGuard.from_env(env))
        assert got == commit
        assert (tmp_path / "b" / "tool" / "main.c").read_text() == "int main(void){return 0;}\n"
        assert not (tmp_path / "b" / ".git").exists() and not (tmp_path / "b" / "later").exists()
    assert any(path.startswith("/tk.git/info/refs") for _, path, _ in server.hits)


def test_the_connection_goes_to_the_checked_address(served, tmp_path: Path) -> None:
    """git.invalid resolves nowhere; the guard's (test) resolver answers 127.0.0.1, and git
    reaches the server only because it is pinned there (http.curloptResolve)."""
    server, commit = served
    guard = NetGuard.from_env({"WB_ALLOW_PRIVATE_HOSTS": "git.invalid"}, resolver=lambda h, p: ["127.0.0.1"])
    got = gitfetch.checkout(f"http://git.invalid:{server.port}/tk.git", tmp_path / "t", commit=commit,
                            guard=guard)
    assert got == commit
    assert {host for _, _, host in server.hits} == {f"git.invalid:{server.port}"}  # Host keeps the name


def test_a_rebinding_name_is_refused_before_git_runs(served, tmp_path: Path) -> None:
    server, commit = served
    guard = NetGuard.from_env({}, resolver=lambda h, p: ["8.8.8.8", "127.0.0.1"])
    with pytest.raises(EgressDenied, match="loopback"):
        gitfetch.checkout(f"http://mixed.invalid:{server.port}/tk.git", tmp_path / "t", commit=commit,
                          guard=guard)
    assert server.hits == []


def test_redirects_are_not_followed(tmp_path: Path) -> None:
    from wbcore_testing.fixtures import FileServer

    def moved(h) -> None:  # type: ignore[no-untyped-def]
        h.send_response(302)
        h.send_header("Location", "http://127.0.0.2:9/elsewhere.git/info/refs?service=git-upload-pack")
        h.send_header("Content-Length", "0")
        h.end_headers()

    with FileServer(routes={"/": moved}) as server, pytest.raises(NotFound, match="git fetch failed"):
        gitfetch.checkout(f"{server.url}/tk.git", tmp_path / "t", commit="a" * 40,
                          guard=NetGuard.from_env({"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.1"}))


def test_other_transports_and_odd_urls_are_refused(tmp_path: Path) -> None:
    guard = NetGuard.from_env({"WB_ALLOW_PRIVATE_SOURCES": "1"})
    for url in ("ext::sh -c touch% /tmp/pwned", "ssh://host/repo", "git://host/repo", "-uhttp://x/",
                "https://user:pw@host/repo", "file:///tmp/repo", "http://host/re po",
                "https://bücher.example/r", "https://host.example./r"):
        with pytest.raises(InvalidArgs):
            gitfetch.checkout(url, tmp_path / "t", commit="a" * 40, guard=guard)


def test_file_urls_only_when_allowed_and_unknown_commits(git_server, tmp_path: Path) -> None:
    bare, commit = git_repo(tmp_path / "local.git", {"a": "1\n"}, commits=3)
    guard = NetGuard.from_env({})
    assert (gitfetch.checkout(f"file://{bare}", tmp_path / "h", commit=None, guard=guard, allow_file=True)
            != commit)
    assert gitfetch.checkout(f"file://{bare}", tmp_path / "s", commit=commit[:10], guard=guard,
                             allow_file=True) == commit
    with pytest.raises(NotFound, match="not in"):
        gitfetch.checkout(f"file://{bare}", tmp_path / "u", commit="1" * 40, guard=guard, allow_file=True)


def test_bounds_hold(served, tmp_path: Path) -> None:
    server, commit = served
    guard = NetGuard.from_env({"WB_ALLOW_PRIVATE_HOSTS": "127.0.0.1"})
    with pytest.raises(InvalidArgs, match="entries"):
        gitfetch.checkout(f"{server.url}/tk.git", tmp_path / "c", commit=commit, guard=guard,
                          limits=gitfetch.GitLimits(max_files=1))
    with pytest.raises(InvalidArgs, match="10-byte cap"):
        gitfetch.checkout(f"{server.url}/tk.git", tmp_path / "e", commit=commit, guard=guard,
                          limits=gitfetch.GitLimits(max_bytes=10))
    assert not (tmp_path / "e" / "tool").exists()  # refused from the object store, before checkout
    with pytest.raises(Timeout):
        gitfetch.checkout(f"{server.url}/tk.git", tmp_path / "d", commit=commit, guard=guard,
                          limits=gitfetch.GitLimits(timeout=0.0))


def test_one_git_fetcher() -> None:
    """Only gitfetch runs ``git clone`` / ``git fetch`` for sources and installs."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    # an argv naming the subcommand: ["git", ..., "clone"], [..."fetch", ...] as a list's head,
    # or a command line "git clone ..." / "git fetch ..." in one string
    runs_git = re.compile(r"""\[\s*["']git["'][^\]]*["'](clone|fetch)["']|\[\s*["'](clone|fetch)["']\s*,"""
                          r"""|["']git\s+(clone|fetch)\b""")
    found = []
    for rel in files:
        if "/tests/" in f"/{rel}" or rel.endswith("plugins/wbcore-testing/wbcore_testing/fixtures.py"):
            continue
        if runs_git.search((ROOT / rel).read_text(errors="replace")):
            found.append(rel)
    assert found == ["wbcore_runtime/guard/gitfetch.py"], found


@pytest.mark.parametrize("url", ["https://u:ghp_s3cret@github.com/o/r.git", "https://ghp_s3cret@github.com/o/r",
                                 "ssh://git:ghp_s3cret@github.com/o/r"])
def test_a_git_url_with_credentials_is_refused_without_echoing_them(url):
    with pytest.raises(InvalidArgs) as exc:
        gitfetch.check_url(url, allow_file=False)
    assert "ghp_s3cret" not in str(exc.value) and "github.com/o/r" in str(exc.value)
