"""``wbx shell --tier microvm``: PTY sessions served by the C guest agent in a VM restored
from the tier's snapshot, relayed as frames.

The agent is driven frame by frame (sessions, the four-session cap, the allowlist, secrets,
malformed frames, resize, hang-up, virtio-9p mounts), and the whole command is driven as a user would, in a
real terminal: ``tmux`` send-keys / capture-pane. Slow: the first test of a run may build
the image and boot it cold once (the snapshot is kept under ``$WB_MICROVM_CACHE``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

import pytest
from wbcore_microvm import shell, tiers

from wbcore_runtime.dispatch import mounts
from wbcore_runtime.contract import terminal
from wbcore_runtime.wire import frames
from wbcore_terminal.agent import MAX_SESSIONS
from wbcore_testing.conformance import PtySessions
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_testing.fixtures import wait_pane, wbx_executable

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not tiers._probe_tools()[0],
                                 reason=f"microvm unavailable: {tiers._probe_tools()[1]}")]

#: A VM restored under TCG answers slower than a container; its shell wants a plain terminal.
pty = PtySessions(timeout=30.0, env={"TERM": "dumb"})
CACHE = Path(os.environ.get("WB_MICROVM_CACHE") or Path.home() / ".cache" / "wbcore" / "microvm")


@pytest.fixture(scope="module")
def snapshot() -> tiers.Snapshot:
    return tiers.prepare(CACHE)


@pytest.fixture
def box(snapshot):
    vm = shell.open_shell(snapshot, terminal.ShellRequest(timeout_s=120))
    yield vm
    vm.close()


def test_a_session_runs_unprivileged_on_a_tty_without_network_and_reports_its_exit_code(box) -> None:
    kind, obj = pty.open(box, 1, env={"TERM": "dumb", "LD_PRELOAD": "/tmp/x.so"})
    assert kind == frames.PTY_OPENED and obj["ok"] is True, obj
    pty.type(box, 1,
             b"echo uid=$(id -u) tty=$(tty) net=$(ls /sys/class/net | wc -l) pre=${LD_PRELOAD:-none}; exit "
             b"7\n")
    out, closed = pty.until_closed(box)
    assert b"uid=1000 tty=/dev/pts/" in out and b"net=1 " in out, out  # only lo
    assert b"pre=none" in out, out
    assert closed == {"session": 1, "exit_code": 7, "blobs": []}


def test_at_most_four_sessions_per_sandbox(box) -> None:
    for sid in range(1, MAX_SESSIONS + 1):
        assert pty.open(box, sid)[1]["ok"] is True
    kind, obj = pty.open(box, 99)
    assert kind == frames.PTY_OPENED and obj["ok"] is False and "4 terminal sessions" in obj["error"]
    kind, obj = pty.open(box, 2)  # an id in use
    assert obj["ok"] is False and "already open" in obj["error"]
    pty.type(box, 2, b"exit 0\n")
    assert pty.next(box, {frames.PTY_CLOSED})[1] == {"session": 2, "exit_code": 0, "blobs": []}
    assert pty.open(box, 5)[1]["ok"] is True  # a closed session frees its place
    # a call's Exec would sweep every uid-1000 process: refused while sessions run
    box.channel.send_frame(frames.seal(frames.EXEC, box.secret, {"id": 1, "argv": ["true"]}, b""))
    assert "terminal sessions are open" in pty.next(box, {frames.REFUSED})[1]["message"]


def test_resize_reaches_the_terminal_and_close_hangs_up(box) -> None:
    assert pty.open(box, 1, rows=30, cols=100)[1]["ok"]
    pty.type(box, 1, b"stty size\n")
    assert b"30 100" in pty.output_until(box, 1, b"30 100")
    box.channel.send_frame(frames.seal(frames.PTY_RESIZE, box.secret,
                                       {"session": 1, "rows": 50, "cols": 132}))
    pty.type(box, 1, b"stty size\n")
    assert b"50 132" in pty.output_until(box, 1, b"50 132")
    pty.type(box, 1, b"sleep 100\n")
    time.sleep(0.5)
    box.channel.send_frame(frames.seal(frames.PTY_CLOSE, box.secret, {"session": 1}))
    assert pty.next(box, {frames.PTY_CLOSED})[1]["exit_code"] == 128 + 1  # SIGHUP


def test_only_allowlisted_programs_start(box) -> None:
    for program in ("/sbin/wbcore-agent", "/sbin/insmod", "sh", "/bin/../sbin/reboot", "/no/such"):
        kind, obj = pty.open(box, 1, program=program)
        assert kind == frames.PTY_OPENED and obj["ok"] is False and "allowlist" in obj["error"], (
            program, obj)
    kind, obj = pty.open(box, 1, program="/bin/sh", args=["-c", "echo args ok; exit 4"])
    assert obj["ok"] is True
    out, closed = pty.until_closed(box)
    assert b"args ok" in out and closed["exit_code"] == 4


def test_frames_without_the_secret_are_refused_and_the_agent_survives(box) -> None:
    wrong = bytes(32)
    kind, obj = pty.open(box, 1, secret=wrong)
    assert kind == frames.REFUSED and obj["reason"] == "secret"
    box.channel.send_frame(frames.encode(frames.PTY_OPEN, frames.pack({"session": 1, "program": "/bin/sh"})))
    assert pty.next(box, {frames.REFUSED})[1]["reason"] == "secret"
    box.channel.send_frame(frames.pty_data(1, b"id\n"))  # no secret
    assert pty.next(box, {frames.REFUSED})[1]["reason"] == "secret"
    box.channel.send_frame(frames.encode(frames.PTY_RESIZE, b"\x01\x02"))  # malformed json payload
    assert pty.next(box, {frames.REFUSED})[1]["reason"] == "malformed"
    box.channel.send_frame(frames.seal(frames.PTY_OPEN, box.secret, {"session": 1, "program": "/bin/sh",
                                                                     "rows": 10 ** 6}))
    assert pty.next(box, {frames.REFUSED})[1]["reason"] == "malformed"
    box.channel.send_frame(frames.seal(frames.PTY_OPEN, box.secret, {"session": 1, "program": "/bin/sh",
                                                                     "args": [1, 2]}))
    assert pty.next(box, {frames.REFUSED})[1]["reason"] == "malformed"
    assert pty.open(box, 1)[1]["ok"] is True  # still serving
    pty.type(box, 1, b"echo alive\n")
    assert b"alive" in pty.output_until(box, 1, b"alive")


def test_a_paste_larger_than_the_channel_while_the_terminal_echoes_does_not_deadlock(box,
                                                                                     make_runtime) -> None:
    """512 KB typed into ``cat`` on a tty that echoes: both directions full at once."""
    lines = 5_000
    typed = b"cat; echo done=$?; exit 0\n" + (b"a" * 99 + b"\n") * lines
    code, seen = pty.paste(box, typed, 100, make_runtime())
    assert code == 0
    assert b"done=0" in seen and seen.count(b"a" * 99) >= lines


def test_the_host_hanging_up_ends_every_session(snapshot) -> None:
    box = shell.open_shell(snapshot, terminal.ShellRequest(timeout_s=60))
    try:
        assert pty.open(box, 1)[1]["ok"]
        pty.type(box, 1, b"sleep 1000 &\necho bg\n")
        pty.output_until(box, 1, b"bg")
        time.sleep(0.5)
        pty.drain(box)  # (a guest writing to a port with no host blocks until one connects)
        box.vm.hangup()  # the host's end of the channel goes away
        time.sleep(1.5)
        box.vm.connect(time.monotonic() + 10)
        box.vm.handshake(time.monotonic() + 20)
        box.vm.sock.setblocking(True)
        box.channel = frames.Channel(box.vm.sock.fileno(), box.vm.sock.fileno())
        # the sessions are gone: the cap is free again, and no uid-1000 process survived
        for sid in range(1, MAX_SESSIONS + 1):
            assert pty.open(box, sid)[1]["ok"] is True
        pty.type(box, 1, b"ps -o user,args | grep -c '[s]leep 1000'\n")
        out = pty.output_until(box, 1, b"\n0")
        assert b"\n0" in out
    finally:
        box.close()


@pytest.fixture
def folders(request):
    """A read-only and a writable host folder the unprivileged QEMU (as root: host uid
    ``vm.QEMU_UID``) and the guest's uid 1000 can use: in the world-searchable temp dir."""
    import tempfile

    ro = Path(tempfile.mkdtemp(prefix="wb-mvshell-ro-"))
    rw = Path(tempfile.mkdtemp(prefix="wb-mvshell-rw-"))
    request.addfinalizer(lambda: [shutil.rmtree(d, ignore_errors=True) for d in (ro, rw)])
    (ro / "in.txt").write_text("from the host\n")
    (ro / "leak").symlink_to("/etc/shadow")  # resolved in the guest, never on the host
    os.chmod(ro, 0o755)
    os.chmod(rw, 0o777)  # (the guest's uid 1000 is an "other" to it; the sticky bit's absence is the point)
    return ro, rw


def test_mounted_folders_are_read_only_unless_rw_and_stay_inside(folders, snapshot) -> None:
    ro, rw = folders
    slots = tiers.prepare(CACHE, mount_slots=shell.MOUNT_SLOTS)
    req = terminal.ShellRequest(timeout_s=60, mounts=(mounts.parse_mount(f"{ro}:/data"),
                                                      mounts.parse_mount(f"{rw}:/tmp/out:rw")))
    box = shell.open_shell(slots, req)
    try:
        script = ("cat /data/in.txt; echo x > /data/no.txt; echo ma > /tmp/out/out.txt; echo de >> "
                  "/tmp/out/out.txt; mkdir /tmp/out/sub && echo deep > /tmp/out/sub/f && chmod 4755 "
                  "/tmp/out/sub/f; cat /data/leak; ls /data/.. | wc -l; mount | grep -c 'nosuid,nodev'; exit "
                  "3")
        assert pty.open(box, 1, args=["-c", script])[1]["ok"] is True
        out, closed = pty.until_closed(box)
        assert b"from the host" in out and b"Read-only file system" in out, out
        assert b"/data/leak" in out and b"No such file" in out, out  # the guest has no /etc/shadow
        assert closed["exit_code"] == 3
        assert (rw / "out.txt").read_text() == "ma\nde\n" and not (ro / "no.txt").exists()
        assert (rw / "sub" / "f").read_text() == "deep\n"  # the shell writes into folders it made
        # no guest-chosen mode (setuid) on the host
        assert (rw / "sub" / "f").stat().st_mode & 0o7777 == 0o600
        # mounts are made before the first session only
        box.channel.send_frame(frames.seal(frames.MOUNT, box.secret,
                                           {"slot": 2, "guest": "/late", "rw": True}))
        obj = pty.next(box, {frames.MOUNTED})[1]
        assert obj["ok"] is False and "before the first terminal session" in obj["error"]
    finally:
        box.close()


def test_mount_requests_are_checked_on_both_sides(folders, snapshot, make_runtime) -> None:
    ro, _ = folders
    slots = tiers.prepare(CACHE, mount_slots=shell.MOUNT_SLOTS)
    box = shell.open_shell(slots,
                           terminal.ShellRequest(timeout_s=60, mounts=(mounts.parse_mount(f"{ro}:/data"),)))
    try:
        # the guest refuses system folders, unnormalised paths and unknown slots itself
        for slot, guest in ((1, "/etc/x"), (1, "/proc"), (1, "/a/../etc"), (1, "/a//b"), (1, "relative"),
                            (9, "/ok")):
            box.channel.send_frame(frames.seal(frames.MOUNT, box.secret, {"slot": slot, "guest": guest}))
            obj = pty.next(box, {frames.MOUNTED})[1]
            assert obj["ok"] is False, (slot, guest, obj)
        box.channel.send_frame(frames.seal(frames.MOUNT, bytes(32), {"slot": 1, "guest": "/x"}))
        assert pty.next(box, {frames.REFUSED})[1]["reason"] == "secret"
    finally:
        box.close()
    too_many = tuple(mounts.Mount(str(ro), f"/d{i}") for i in range(shell.MOUNT_SLOTS + 1))
    with pytest.raises(InvalidArgs, match=f"at most {shell.MOUNT_SLOTS}"):
        tiers.MicrovmTier(make_runtime()).open_shell(terminal.ShellRequest(mounts=too_many))
    ro_only = Path(tempfile_dir())
    os.chmod(ro_only, 0o755)
    try:
        with pytest.raises(InvalidArgs, match="chmod o\\+rwx"):
            tiers.MicrovmTier(make_runtime()).open_shell(
                terminal.ShellRequest(mounts=(mounts.Mount(str(ro_only), "/data", True),)))
    finally:
        shutil.rmtree(ro_only, ignore_errors=True)
    if os.geteuid() == 0:
        hidden = Path(tempfile_dir()) / "private"
        hidden.mkdir(mode=0o777)
        os.chmod(hidden, 0o777)
        os.chmod(hidden.parent, 0o700)  # an ancestor QEMU's uid cannot search
        try:
            with pytest.raises(InvalidArgs, match="cannot use it"):
                tiers.MicrovmTier(make_runtime()).open_shell(
                    terminal.ShellRequest(mounts=(mounts.Mount(str(hidden), "/data", True),)))
        finally:
            shutil.rmtree(hidden.parent, ignore_errors=True)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="wb-mvshell-")


def test_the_deadline_tears_the_vm_down(snapshot, make_runtime) -> None:
    box = shell.open_shell(snapshot, terminal.ShellRequest(timeout_s=3))
    try:
        t0 = time.monotonic()
        with pytest.raises(terminal.PtyError, match="deadline"):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            try:
                terminal.service(make_runtime()).attach(box.channel, box.secret, terminal.ShellRequest(),
                                                        stdin_fd=in_r, stdout_fd=out_w, deadline=box.deadline)
            finally:
                for fd in (in_r, in_w, out_r, out_w):
                    os.close(fd)
        box.vm.proc.wait(timeout=shell.GRACE_S + 5)  # the watchdog killed QEMU
        assert time.monotonic() - t0 < 3 + shell.GRACE_S + 5
    finally:
        box.close()


# --- wbx shell in a real terminal (tmux) ------------------------------------------------------


def test_wbx_shell_in_tmux_with_a_rw_mount_resizes_and_propagates_the_exit_code(tmux, wb_home, tmp_path,
                                                                                snapshot,
                                                                               folders) -> None:
    cmd, name = tmux
    done = tmp_path / "exit"
    _, rw = folders
    line = (f"WB_MICROVM_CACHE={shlex.quote(str(CACHE))} WB_MICROVM_POOL=0 "
            f"WB_HOME={shlex.quote(str(wb_home))} {shlex.quote(wbx_executable())} shell --tier microvm "
            f"--mount {shlex.quote(str(rw))}:/data:rw; echo $? > {shlex.quote(str(done))}")
    cmd("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c", line)
    # busybox ash in /tmp/w (HOME); tmux trims the trailing space
    pane = wait_pane(cmd, name, "~ $", 60.0, 0.2)
    assert "~ $" in pane, pane
    cmd("send-keys", "-t", name, "echo uid=$(id -u) > /data/who; stty size; echo $((6*7))x", "Enter")
    pane = wait_pane(cmd, name, "42x", 60.0, 0.2)
    assert "42x" in pane and "40 120" in pane, pane
    assert (rw / "who").read_text() == "uid=1000\n"
    cmd("resize-window", "-t", name, "-x", "100", "-y", "30")
    time.sleep(0.5)
    cmd("send-keys", "-t", name, "stty size", "Enter")
    pane = wait_pane(cmd, name, "30 100", 60.0, 0.2)
    assert "30 100" in pane, pane
    cmd("send-keys", "-t", name, "exit 5", "Enter")
    end = time.monotonic() + 20
    while not done.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert done.read_text().strip() == "5"
