"""``wbx shell --tier container``: a PTY session in a throwaway container, relayed as frames.

The agent is driven frame by frame (sessions, limits, secrets, malformed frames), and the
whole command is driven as a user would, in a real terminal: ``tmux`` send-keys / capture-pane.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

import pytest

from wbcore_container import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe()[0],
                                reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")

from wbcore_runtime.contract.terminal import ShellRequest  # noqa: E402
from wbcore_runtime.wire import frames  # noqa: E402
from wbcore_testing.conformance import PtySessions  # noqa: E402
from wbcore_runtime.contract.errors import InvalidArgs, NotFound  # noqa: E402
from wbcore_testing.fixtures import wait_pane, wbx_executable  # noqa: E402

from wbcore_container import rootfs, shell  # noqa: E402
from wbcore_terminal.agent import MAX_SESSIONS  # noqa: E402


pty = PtySessions(timeout=10.0)


@pytest.fixture
def root(wb_home: Path) -> rootfs.Root:
    return rootfs.build(wb_home)


@pytest.fixture
def sandbox(root, make_runtime):
    box = shell.open_shell(make_runtime(), root, ShellRequest(timeout_s=60))
    yield box
    box.close()


def test_a_session_runs_unprivileged_without_network_and_reports_its_exit_code(sandbox) -> None:
    kind, obj = pty.open(sandbox, 1)
    assert kind == frames.PTY_OPENED and obj["ok"] is True, obj
    pty.type(sandbox, 1,
             b"echo uid=$(id -u) net=$(cat /proc/net/dev | grep -c :); ls /root /work 2>&1 | wc -l; exit 7\n")
    out = pty.output_until(sandbox, 1, b"uid=1000 net=")
    assert b"uid=1000 net=1" in out  # only lo
    kind, obj = pty.next(sandbox, {frames.PTY_CLOSED})
    assert obj == {"session": 1, "exit_code": 7, "blobs": []}


def test_at_most_four_sessions_per_sandbox(sandbox) -> None:
    for sid in range(1, MAX_SESSIONS + 1):
        assert pty.open(sandbox, sid)[1]["ok"] is True
    kind, obj = pty.open(sandbox, 99)
    assert kind == frames.PTY_OPENED and obj["ok"] is False and "4 terminal sessions" in obj["error"]
    pty.type(sandbox, 2, b"exit 0\n")
    assert pty.next(sandbox, {frames.PTY_CLOSED})[1]["session"] == 2
    assert pty.open(sandbox, 5)[1]["ok"] is True  # a closed session frees its place


def test_resize_reaches_the_terminal_and_close_hangs_up(sandbox) -> None:
    assert pty.open(sandbox, 1, rows=30, cols=100)[1]["ok"]
    pty.type(sandbox, 1, b"stty size\n")
    assert b"30 100" in pty.output_until(sandbox, 1, b"30 100")
    sandbox.channel.send_frame(frames.seal(frames.PTY_RESIZE, sandbox.secret,
                                           {"session": 1, "rows": 50, "cols": 132}))
    pty.type(sandbox, 1, b"stty size\n")
    assert b"50 132" in pty.output_until(sandbox, 1, b"50 132")
    pty.type(sandbox, 1, b"sleep 100\n")
    sandbox.channel.send_frame(frames.seal(frames.PTY_CLOSE, sandbox.secret, {"session": 1}))
    assert pty.next(sandbox, {frames.PTY_CLOSED})[1]["exit_code"] == 128 + 1  # SIGHUP


def test_only_allowlisted_programs_start(sandbox, root, make_runtime) -> None:
    kind, obj = pty.open(sandbox, 1, program="/usr/bin/id")
    assert obj["ok"] is False and "allowlist" in obj["error"]
    with pytest.raises(InvalidArgs, match="allowlist"):
        shell.open_shell(make_runtime(), root, ShellRequest(program="/usr/bin/perl"))


def test_frames_without_the_secret_are_refused_and_the_agent_survives(sandbox) -> None:
    wrong = bytes(32)
    kind, obj = pty.open(sandbox, 1, secret=wrong)
    assert kind == frames.REFUSED and obj["reason"] == "secret"
    sandbox.channel.send_frame(frames.encode(frames.PTY_OPEN,
                                             frames.pack({"session": 1, "program": "/bin/sh"})))
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    sandbox.channel.send_frame(frames.pty_data(1, b"id\n"))  # no secret
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    sandbox.channel.send_frame(frames.encode(frames.PTY_RESIZE, b"\x01\x02"))  # malformed json payload
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "malformed"
    sandbox.channel.send_frame(frames.seal(frames.PTY_OPEN, sandbox.secret,
                                           {"session": 1, "program": "/bin/sh",
                                                                             "rows": 10 ** 6}))
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "malformed"
    sandbox.channel.send_frame(frames.ping(wrong))
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    assert pty.open(sandbox, 1)[1]["ok"] is True  # still serving


def test_garbage_on_the_channel_ends_the_agent_not_the_host(sandbox) -> None:
    sandbox.channel.send_frame(b"\xff\xff\xff\xff\x16")  # a length over the 64 MiB cap
    assert pty.next(sandbox, {frames.REFUSED})[1]["reason"] == "too-large"
    sandbox.running.proc.wait(timeout=5)
    assert not sandbox.alive()


def test_a_paste_larger_than_the_pipes_while_the_terminal_echoes_does_not_deadlock(sandbox,
                                                                                   make_runtime) -> None:
    """2 MB typed into ``cat`` on a tty that echoes: both directions full at once; the
    buffers on both sides keep reading, so every line comes back (twice) and it ends."""
    lines = 20_000
    # cat writes every line back while the tty echoes it too: output twice the input, and a
    # child blocked on output while its input queue is full
    typed = b"cat; echo done=$?; exit 0\n" + (b"a" * 99 + b"\n") * lines
    code, seen = pty.paste(sandbox, typed, 60, make_runtime())
    assert code == 0  # the EOT after stdin's end ended cat, then the shell
    assert b"done=0" in seen and seen.count(b"a" * 99) >= lines  # (the tty may drop echoes under load)


# --- wbx shell in a real terminal (tmux) ------------------------------------------------------


def test_wbx_shell_in_tmux_with_a_rw_mount_and_exit_code(tmux, wb_home, tmp_path, request) -> None:
    cmd, name = tmux
    request_cleanup = request.addfinalizer
    import tempfile

    # pytest's tmp_path is private to this user; the container runs as the unprivileged host
    # uid, which must reach the folder (a sibling in the world-searchable temp dir).
    work = Path(tempfile.mkdtemp(prefix="wb-shell-test-"))
    request_cleanup(lambda: shutil.rmtree(work, ignore_errors=True))
    (work / "in.txt").write_text("from the host\n")
    os.chmod(work, 0o755)
    if os.geteuid() == 0:
        os.chown(work, bwrap.HOST_UID, bwrap.HOST_UID)
    done = tmp_path / "exit"
    line = (f"WB_HOME={shlex.quote(str(wb_home))} {shlex.quote(wbx_executable())} shell --tier container "
            f"--mount {shlex.quote(str(work))}:/data:rw; echo $? > {shlex.quote(str(done))}; sleep 600")
    # The trailing sleep keeps the pane after wbx ends, so a failed start shows its message
    # here rather than as a vanished session. The prompt's "$ " is matched as "$": tmux's
    # capture-pane drops trailing blanks from every line.
    cmd("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c", line)
    pane = wait_pane(cmd, name, "$")
    assert pane.rstrip().endswith("$") and not done.exists(), pane
    cmd("send-keys", "-t", name, "cat /data/in.txt; echo made > /data/out.txt; stty size; echo $((6*7))x",
        "Enter")
    pane = wait_pane(cmd, name, "42x")
    assert "from the host" in pane and "42x" in pane and "40 120" in pane, pane
    cmd("resize-window", "-t", name, "-x", "100", "-y", "30")
    time.sleep(0.3)
    cmd("send-keys", "-t", name, "stty size", "Enter")
    pane = wait_pane(cmd, name, "30 100")
    assert "30 100" in pane, pane
    cmd("send-keys", "-t", name, "exit 5", "Enter")
    end = time.monotonic() + 15
    while not done.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert done.read_text().strip() == "5"
    assert (work / "out.txt").read_text() == "made\n"


def test_wbx_shell_names_the_tiers_that_offer_one(wbx, make_runtime) -> None:
    r = wbx("shell", "--tier", "instance", runtime=make_runtime())
    assert r.exit_code != 0 and "offers no interactive shell" in r.stderr and "container" in r.stderr
    r = wbx("shell", "--mount", "/no/such:/data", runtime=make_runtime())
    assert r.exit_code != 0 and "does not exist" in r.stderr


def test_run_shell_passes_program_arguments_and_the_exit_code(make_runtime) -> None:
    from wbcore_cli.shell import run_shell

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.close(in_w)  # no keystrokes: the program ends by itself
    try:
        code = run_shell(make_runtime(), "container", [], "/bin/sh", ["-c", "echo args ok; exit 4"], 30.0,
                         stdin_fd=in_r, stdout_fd=out_w)
    finally:
        os.close(out_w)
        os.close(in_r)
    out = os.read(out_r, 1 << 16)
    os.close(out_r)
    assert code == 4 and b"args ok" in out


def test_wbx_shell_without_the_terminal_engine_says_what_to_install(make_runtime) -> None:
    """The relay and the agent are wbcore-terminal's service: without it no container starts."""
    from wbcore_cli.shell import run_shell

    with pytest.raises(NotFound, match="no terminal service is installed; pip install wbcore-terminal"):
        run_shell(make_runtime(plugins=["container"]), "container", [], "/bin/sh", [], 30.0)
