"""``wbx shell --tier container``: a PTY session in a throwaway container, relayed as frames.

The agent is driven frame by frame (sessions, limits, secrets, malformed frames), and the
whole command is driven as a user would, in a real terminal: ``tmux`` send-keys / capture-pane.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wb_container import bwrap

pytestmark = pytest.mark.skipif(not bwrap.probe()[0], reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")

from wbcore import frames, terminal  # noqa: E402
from wbcore.errors import InvalidArgs  # noqa: E402

from wb_container import rootfs, shell  # noqa: E402


@pytest.fixture
def root(wb_home: Path) -> rootfs.Root:
    return rootfs.build(wb_home)


@pytest.fixture
def sandbox(root):
    box = shell.open_shell(root, terminal.ShellRequest(timeout_s=60))
    yield box
    box.close()


def _open(box, sid: int, program: str = "/bin/sh", args=(), secret: bytes | None = None, rows=24, cols=80):
    box.channel.send_frame(frames.seal(frames.PTY_OPEN, secret or box.secret,
                                       {"session": sid, "program": program, "args": list(args), "rows": rows,
                                        "cols": cols}))
    return _next(box, {frames.PTY_OPENED, frames.REFUSED})


def _next(box, kinds, timeout: float = 10.0):
    """The next frame of one of ``kinds`` (PtyData of other sessions is skipped)."""
    import select

    end = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([box.channel.read_fd], [], [], max(0.0, end - time.monotonic()))
        assert ready, f"no {sorted(frames.name(k) for k in kinds)} within {timeout} s"
        kind, payload = box.channel.recv()
        if kind in kinds:
            return kind, (frames.unpack(payload)[0] if kind not in frames.RAW else frames.open_pty_data(payload))


def _type(box, sid: int, text: bytes) -> None:
    box.channel.send_frame(frames.pty_data(sid, text, box.secret))


def _output_until(box, sid: int, needle: bytes, timeout: float = 10.0) -> bytes:
    seen = b""
    end = time.monotonic() + timeout
    while needle not in seen:
        kind, got = _next(box, {frames.PTY_DATA}, max(0.1, end - time.monotonic()))
        if got[0] == sid:
            seen += got[1]
    return seen


def test_a_session_runs_unprivileged_without_network_and_reports_its_exit_code(sandbox) -> None:
    kind, obj = _open(sandbox, 1)
    assert kind == frames.PTY_OPENED and obj["ok"] is True, obj
    _type(sandbox, 1, b"echo uid=$(id -u) net=$(cat /proc/net/dev | grep -c :); ls /root /work 2>&1 | wc -l; exit 7\n")
    out = _output_until(sandbox, 1, b"uid=1000 net=")
    assert b"uid=1000 net=1" in out  # only lo
    kind, obj = _next(sandbox, {frames.PTY_CLOSED})
    assert obj == {"session": 1, "exit_code": 7, "blobs": []}


def test_at_most_four_sessions_per_sandbox(sandbox) -> None:
    for sid in range(1, terminal.MAX_SESSIONS + 1):
        assert _open(sandbox, sid)[1]["ok"] is True
    kind, obj = _open(sandbox, 99)
    assert kind == frames.PTY_OPENED and obj["ok"] is False and "4 terminal sessions" in obj["error"]
    _type(sandbox, 2, b"exit 0\n")
    assert _next(sandbox, {frames.PTY_CLOSED})[1]["session"] == 2
    assert _open(sandbox, 5)[1]["ok"] is True  # a closed session frees its place


def test_resize_reaches_the_terminal_and_close_hangs_up(sandbox) -> None:
    assert _open(sandbox, 1, rows=30, cols=100)[1]["ok"]
    _type(sandbox, 1, b"stty size\n")
    assert b"30 100" in _output_until(sandbox, 1, b"30 100")
    sandbox.channel.send_frame(frames.seal(frames.PTY_RESIZE, sandbox.secret, {"session": 1, "rows": 50, "cols": 132}))
    _type(sandbox, 1, b"stty size\n")
    assert b"50 132" in _output_until(sandbox, 1, b"50 132")
    _type(sandbox, 1, b"sleep 100\n")
    sandbox.channel.send_frame(frames.seal(frames.PTY_CLOSE, sandbox.secret, {"session": 1}))
    assert _next(sandbox, {frames.PTY_CLOSED})[1]["exit_code"] == 128 + 1  # SIGHUP


def test_only_allowlisted_programs_start(sandbox, root) -> None:
    kind, obj = _open(sandbox, 1, program="/usr/bin/id")
    assert obj["ok"] is False and "allowlist" in obj["error"]
    with pytest.raises(InvalidArgs, match="allowlist"):
        shell.open_shell(root, terminal.ShellRequest(program="/usr/bin/perl"))


def test_frames_without_the_secret_are_refused_and_the_agent_survives(sandbox) -> None:
    wrong = bytes(32)
    kind, obj = _open(sandbox, 1, secret=wrong)
    assert kind == frames.REFUSED and obj["reason"] == "secret"
    sandbox.channel.send_frame(frames.encode(frames.PTY_OPEN, frames.pack({"session": 1, "program": "/bin/sh"})))
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    sandbox.channel.send_frame(frames.pty_data(1, b"id\n"))  # no secret
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    sandbox.channel.send_frame(frames.encode(frames.PTY_RESIZE, b"\x01\x02"))  # malformed json payload
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "malformed"
    sandbox.channel.send_frame(frames.seal(frames.PTY_OPEN, sandbox.secret, {"session": 1, "program": "/bin/sh",
                                                                             "rows": 10 ** 6}))
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "malformed"
    sandbox.channel.send_frame(frames.ping(wrong))
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "secret"
    assert _open(sandbox, 1)[1]["ok"] is True  # still serving


def test_garbage_on_the_channel_ends_the_agent_not_the_host(sandbox) -> None:
    sandbox.channel.send_frame(b"\xff\xff\xff\xff\x16")  # a length over the 64 MiB cap
    assert _next(sandbox, {frames.REFUSED})[1]["reason"] == "too-large"
    sandbox.running.proc.wait(timeout=5)
    assert not sandbox.alive()


def test_a_paste_larger_than_the_pipes_while_the_terminal_echoes_does_not_deadlock(sandbox) -> None:
    """2 MB typed into ``cat`` on a tty that echoes: both directions full at once; the
    buffers on both sides keep reading, so every line comes back (twice) and it ends."""
    import threading

    lines = 20_000
    # cat writes every line back while the tty echoes it too: output twice the input, and a
    # child blocked on output while its input queue is full
    typed = b"cat; echo done=$?; exit 0\n" + (b"a" * 99 + b"\n") * lines
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    seen = bytearray()

    def feed() -> None:
        with os.fdopen(in_w, "wb") as fh:
            fh.write(typed)

    def drain() -> None:
        while chunk := os.read(out_r, 1 << 16):
            seen.extend(chunk)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    for t in threads:
        t.start()
    try:
        code = terminal.attach(sandbox.channel, sandbox.secret, terminal.ShellRequest(), stdin_fd=in_r,
                               stdout_fd=out_w, deadline=time.monotonic() + 60)
    finally:
        os.close(out_w)
        os.close(in_r)
    threads[1].join(10)
    assert code == 0  # the EOT after stdin's end ended cat, then the shell
    assert b"done=0" in seen and seen.count(b"a" * 99) >= lines  # (the tty may drop echoes under load)


# --- wbx shell in a real terminal (tmux) ------------------------------------------------------


def _wbx() -> str:
    exe = Path(sys.executable).with_name("wbx")
    if not exe.exists():
        pytest.skip("the wbx entry point is not installed next to this interpreter")
    return str(exe)


@pytest.fixture
def tmux(tmp_path: Path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    sock = str(tmp_path / "tmux.sock")
    name = "wbshell"

    def cmd(*args: str) -> str:
        return subprocess.run(["tmux", "-S", sock, *args], check=True, capture_output=True, text=True,
                              timeout=10).stdout

    yield cmd, name
    subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10)


def _wait_pane(cmd, name: str, needle: str, timeout: float = 20.0) -> str:
    end = time.monotonic() + timeout
    while True:
        pane = cmd("capture-pane", "-p", "-t", name, "-S", "-50")
        if needle in pane or time.monotonic() > end:
            return pane
        time.sleep(0.1)


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
    line = (f"WB_HOME={shlex.quote(str(wb_home))} {shlex.quote(_wbx())} shell --tier container "
            f"--mount {shlex.quote(str(work))}:/data:rw; echo $? > {shlex.quote(str(done))}")
    cmd("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c", line)
    assert "$" in _wait_pane(cmd, name, "$ ")
    cmd("send-keys", "-t", name, "cat /data/in.txt; echo made > /data/out.txt; stty size; echo $((6*7))x", "Enter")
    pane = _wait_pane(cmd, name, "42x")
    assert "from the host" in pane and "42x" in pane and "40 120" in pane, pane
    cmd("resize-window", "-t", name, "-x", "100", "-y", "30")
    time.sleep(0.3)
    cmd("send-keys", "-t", name, "stty size", "Enter")
    pane = _wait_pane(cmd, name, "30 100")
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
    from wbcore.cli.shell import run_shell

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
