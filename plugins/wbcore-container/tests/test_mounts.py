"""``wbx run --mount``: a host folder the deployer grants to one posix call, bound into its
container — the shipped git-history toolkit's recipes against a real repository."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from wbcore_container import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe()[0] or shutil.which("git") is None,
                                reason="needs bubblewrap and git")

from wbcore_audit_trail import reader  # noqa: E402
from wbcore_runtime.build import builder  # noqa: E402
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs  # noqa: E402
from wbcore_testing.fixtures import git_in, manifest_text, write_toolkit  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[3] / "toolkits" / "git-history"


@pytest.fixture
def repo(history_repo: Path) -> Path:
    """wbcore-testing's repository (three commits by two authors, readable by the container's uid)."""
    return history_repo


@pytest.fixture
def rt(make_runtime, toolkit_root):
    shutil.copytree(SHIPPED, toolkit_root / "git-history")
    runtime = make_runtime()
    runtime.discover(refresh=True)
    builder.build(runtime, "git-history")
    return runtime


def recipe(skill: str, repo: str, *tail: str) -> list[str]:
    """The program arguments of a git-history skill's ``Call`` block, its ``<repo>`` filled
    and its optional ``[…]`` parts dropped (``tail`` appended)."""
    text = (SHIPPED / "skills" / f"{skill}.org").read_text()
    block = re.search(r"#\+begin_src sh\n(.*?)#\+end_src", text, re.S).group(1)  # type: ignore[union-attr]
    line = re.sub(r"\\\n\s*", "", block).strip()
    line = re.sub(r"\[[^\]]*\]", "", line).replace("<repo>", repo)
    words = shlex.split(line)
    assert words[0] == "git"
    words = [w for w in words[1:] if w not in ("--", "<path>…", "<path>")]
    return [*words, *tail]


def test_git_history_recipes_run_against_a_mounted_repository(rt, repo) -> None:
    head = git_in(repo, "rev-parse", "HEAD").strip()
    log = rt.call("git", recipe("log", "/repo"), mounts=[f"{repo}:/repo"])
    assert log.exit_code == 0, log.stderr
    rows = [ln.split("\t") for ln in log.stdout.decode().splitlines()]
    assert [r[3] for r in rows] == ["third: another file", "second: a line by Ada", "first: add notes"]
    assert rows[0][0] == head and rows[1][1] == "Bob"
    blame = rt.call("git", [*recipe("blame", "/repo"), "--", "notes.txt"], mounts=[f"{repo}:/repo"])
    assert blame.exit_code == 0, blame.stderr
    text = blame.stdout.decode()
    assert "author Ada" in text and "author Bob" in text and "\ttwo" in text
    show = rt.call("git", ["--no-pager", "-C", "/repo", "show", "--stat", "HEAD~1"],
                   mounts=[f"{repo}:/repo:ro"])
    assert show.exit_code == 0 and b"second: a line by Ada" in show.stdout and b"notes.txt" in show.stdout


def test_wbx_run_mount_on_the_command_line_guest_path_defaults_to_the_host_path(rt, wbx, repo) -> None:
    r = wbx("run", "--mount", str(repo), "git", "--no-pager", "-C", str(repo), "log", "--format=%s", "-n",
            "1", runtime=rt, input=b"")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "third: another file"
    # without the mount the container sees no such folder
    r = wbx("run", "git", "-C", str(repo), "log", runtime=rt, input=b"")
    assert r.exit_code != 0 and "cannot change to" in r.stderr


def test_a_read_only_mount_cannot_be_written(rt, repo) -> None:
    out = rt.call("git", ["-C", "/repo", "tag", "v1"], mounts=[f"{repo}:/repo"])
    assert out.exit_code != 0 and b"Read-only file system" in out.stderr
    assert not (repo / ".git" / "refs" / "tags" / "v1").exists()


def test_rw_needs_the_mount_rw_cap_declared_and_granted(make_runtime, toolkit_root, wbx, repo) -> None:
    write_toolkit(toolkit_root, "gitw", manifest_text("gitw", exec="posix", caps="mount-rw",
                                                      extra={"CLI_BIN": "git"}))
    rt = make_runtime()
    rt.discover(refresh=True)
    builder.build(rt, "gitw")
    with pytest.raises(CapabilityDenied, match="wbx toolkit grant gitw mount-rw"):
        rt.call("git", ["-C", "/repo", "tag", "v1"], mounts=[f"{repo}:/repo:rw"])
    # the container's unprivileged host uid writes as "others" (or: chown the folder to it)
    for d in [repo, *(p for p in repo.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o777)
    r = wbx("toolkit", "grant", "gitw", "mount-rw", runtime=rt)
    assert r.exit_code == 0, r.stderr
    rt = make_runtime()
    out = rt.call("git", ["-C", "/repo", "tag", "v1"], mounts=[f"{repo}:/repo:rw"])
    assert out.exit_code == 0, out.stderr
    assert (repo / ".git" / "refs" / "tags" / "v1").is_file()


def test_mounts_are_refused_with_the_reason(rt, make_runtime, repo, wb_home) -> None:
    with pytest.raises(InvalidArgs, match="inside the wbcore home"):
        rt.call("git", ["status"], mounts=[f"{wb_home}:/h"])
    with pytest.raises(InvalidArgs, match="does not exist"):
        rt.call("git", ["status"], mounts=["/no/such/folder:/x"])
    with pytest.raises(InvalidArgs, match="belongs to the sandbox"):
        rt.call("git", ["status"], mounts=[f"{repo}:/usr/repo"])
    with pytest.raises(InvalidArgs, match="kernel's own view"):
        rt.call("git", ["status"], mounts=["/proc:/p"])
    # a call that runs in this process binds nothing: the error names the tiers that do (the
    # built-in `upper` runs at tier instance, which wbcore-wasmtime serves)
    if importlib.util.find_spec("wbcore_wasmtime") is not None:
        with pytest.raises(InvalidArgs, match="tiers that do: container"):
            rt.call("upper", [], b"x", mounts=[f"{repo}:/repo"])



def test_each_grant_is_audited(rt, repo, wb_home) -> None:
    from wbcore_runtime.dispatch.audit import AuditLog

    assert rt.call("git", ["-C", "/repo", "status", "--short"], mounts=[f"{repo}:/repo"]).exit_code == 0
    AuditLog.for_home(wb_home).flush()
    rows = [e for e in reader.entries(AuditLog.for_home(wb_home)) if e.get("cap") == "mount"]
    assert rows and rows[-1]["op"] == "ro" and rows[-1]["outcome"] == "allowed"
    assert str(repo) in rows[-1]["target"] and "/repo" in rows[-1]["target"]


COUNT_TASK = """#+TITLE: count
* Count
#+begin_src sh :role task :name count
git --no-pager -C "$1" rev-list --count HEAD; echo x > "$1/new" 2>/dev/null || echo read-only
#+end_src
"""


def test_wbx_toolkit_run_mounts_a_folder_for_a_task(make_toolkit, make_runtime, wbx, repo) -> None:
    make_toolkit("tk", exec="task", skills={"overview": "#+TITLE: o\n", "count": COUNT_TASK})
    rt = make_runtime(env={"WB_TOOLKIT_EXEC": "1"})
    r = wbx("toolkit", "run", "--mount", f"{repo}:/work/repo", "tk", "count", "--", "/work/repo", runtime=rt,
            input=b"")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["3", "read-only"]
    assert not (repo / "new").exists()
    r = wbx("toolkit", "run", "--mount", f"{repo}:/work/repo:rw", "tk", "count", "--", "/work/repo",
            runtime=rt, input=b"")
    assert r.exit_code != 0 and "mount-rw" in r.stderr
