"""The ``task`` shape: ``:role task`` blocks run only with the deployer's opt-in, only inside
the container tier (never on the host), through ``wbx toolkit run <tk> <task> -- <args>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_container import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe()[0],
                                reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")

from wbcore_runtime.toolkit import tasks  # noqa: E402
from wbcore_runtime.contract.errors import CapabilityDenied, NotFound  # noqa: E402

MARK = "/tmp/wb-task-shape-never-on-the-host"

RELEASE = f"""#+TITLE: release
* Release
#+begin_src bash :role task :name release
echo "args: $*"; echo "task: $0"; cat /toolkit/data/version.txt
touch {MARK}; test -e {MARK} && echo "marked inside"
ls /root /work 2>&1 | head -1
tr a-z A-Z
exit 3
#+end_src
#+begin_src bash :role task
echo unnamed
#+end_src
#+begin_src bash
echo not a task
#+end_src
"""


@pytest.fixture
def task_toolkit(make_toolkit, make_runtime):
    path = make_toolkit("tk", exec="task", skills={"overview": "#+TITLE: o\n", "release": RELEASE})
    (path / "data").mkdir()
    (path / "data" / "version.txt").write_text("1.2.3\n")
    return path


def test_tasks_are_found_by_name_or_skill(task_toolkit, make_runtime) -> None:
    rt = make_runtime()
    assert [b.name for b in tasks.find_tasks(rt.toolkit("tk"))] == ["release", "release-2"]


def test_without_the_opt_in_it_says_how_and_where(task_toolkit, wbx, make_runtime) -> None:
    Path(MARK).unlink(missing_ok=True)
    rt = make_runtime(env={})
    with pytest.raises(CapabilityDenied, match=r"would run in tier container.*set WB_TOOLKIT_EXEC=1"):
        tasks.run_task(rt, "tk", "release", [], b"")
    r = wbx("toolkit", "run", "tk", "release", runtime=rt)
    assert r.exit_code != 0 and "WB_TOOLKIT_EXEC=1" in r.stderr and "tier container" in r.stderr
    assert not Path(MARK).exists()


def test_with_the_opt_in_it_runs_in_the_container_never_on_the_host(task_toolkit, wbx, make_runtime) -> None:
    Path(MARK).unlink(missing_ok=True)
    rt = make_runtime(env={"WB_TOOLKIT_EXEC": "1"})
    r = wbx("toolkit", "run", "tk", "release", "--", "v1", "two words", runtime=rt, input=b"shout\n")
    assert r.exit_code == 3, r.stderr
    out = r.stdout
    assert "args: v1 two words" in out and "task: release" in out and "1.2.3" in out and "SHOUT" in out
    assert "marked inside" in out and "No such file or directory" in out
    assert not Path(MARK).exists()  # the /tmp it wrote was the container's
    assert wbx("toolkit", "run", "tk", "release-2", runtime=rt, input=b"").stdout.strip() == "unnamed"


def test_tasks_never_run_in_a_weaker_tier_and_unknown_tasks_are_named(task_toolkit, make_runtime) -> None:
    rt = make_runtime(env={"WB_TOOLKIT_EXEC": "1"})
    for weaker in ("instance", "os_process"):
        with pytest.raises(CapabilityDenied, match=f"tasks never run in tier {weaker}"):
            tasks.run_task(rt, "tk", "release", [], b"", tier=weaker)
    with pytest.raises(NotFound, match="its tasks: release, release-2"):
        tasks.run_task(rt, "tk", "deploy", [], b"")


def test_a_task_past_its_deadline_is_killed(make_toolkit, make_runtime) -> None:
    from wbcore_runtime.contract.errors import Timeout

    spin = "#+TITLE: s\n#+begin_src sh :role task :name spin\nwhile :; do :; done\n#+end_src\n"
    make_toolkit("spin", exec="task", skills={"overview": "#+TITLE: o\n", "spin": spin})
    rt = make_runtime(env={"WB_TOOLKIT_EXEC": "1"})
    with pytest.raises(Timeout, match="deadline"):
        tasks.run_task(rt, "spin", "spin", [], b"", timeout=1.0)
