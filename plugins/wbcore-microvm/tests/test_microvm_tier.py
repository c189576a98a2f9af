"""The microvm tier: the shared conformance suite (wbcore_testing.conformance) in a QEMU guest restored
from a snapshot, and the guest agent's protocol: the session secret is required, malformed
frames are refused without a crash, the allowlist holds, the accelerator is reported.

Slow: the first test of a run builds the image and boots it cold once (the snapshot is kept
under ``$WB_MICROVM_CACHE``, default ``~/.cache/wbcore/microvm`` here, and reused by every
later run); each call then restores a VM from it.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from wbcore_microvm import tiers
from wbcore_microvm import vm as _vm
from wbcore_microvm.tiers import MicrovmTier

from wbcore_runtime.wire import frames
from wbcore_testing.conformance import PosixTierConformance
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, Timeout

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not tiers._probe_tools()[0],
                                 reason=f"microvm unavailable: {tiers._probe_tools()[1]}")]

CACHE = Path(os.environ.get("WB_MICROVM_CACHE") or Path.home() / ".cache" / "wbcore" / "microvm")


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """One image and snapshot for every test home of the run (and of later runs)."""
    monkeypatch.setenv("WB_MICROVM_CACHE", str(CACHE))


@pytest.fixture(scope="module")
def snapshot() -> tiers.Snapshot:
    t0 = time.monotonic()
    snap = tiers.prepare(CACHE)
    print(f"\nmicrovm: snapshot ready in {time.monotonic() - t0:.1f} s (accelerator {snap.accel}; cold boot "
          f"{snap.cold_boot_s:.1f} s, snapshot {snap.snapshot_s:.2f} s when it was built)")
    return snap


class TestMicrovmConformance(PosixTierConformance):
    tier = "microvm"

    def driver(self, rt):
        return MicrovmTier(rt)

    def kv_argv(self, request):
        return ["wb-cap", "kv", json.dumps(request)]

    @pytest.fixture(autouse=True)
    def _ready(self, snapshot):
        return snapshot


# --- what this tier adds ------------------------------------------------------------------------


@pytest.fixture
def rt(make_runtime, snapshot):
    return make_runtime()


def call(rt, cli, argv, stdin=b"", **kw):
    return MicrovmTier(rt).call(TestMicrovmConformance().request(rt, cli, argv, stdin, **kw))


def test_usage_names_the_accelerator_and_the_guest_runs_unprivileged(rt, snapshot) -> None:
    res = call(rt, "sh", ["-c", "id -u; id -G; cat /proc/self/limits; cat /proc/cmdline; uname -r"])
    assert res.usage.isolation == snapshot.accel in ("kvm", "tcg")
    out = res.stdout.decode().splitlines()
    assert out[0] == "1000" and out[1] == "1000"
    limits = {line[:26].strip(): line[26:].split()[0] for line in out[3:20] if line.startswith("Max")}
    assert int(limits["Max processes"]) == tiers.PROCESSES and int(limits["Max core file size"]) == 0
    assert int(limits["Max open files"]) == tiers.NOFILE
    assert snapshot.secret.hex() not in res.stdout.decode()  # /proc/cmdline is covered after boot
    assert snapshot.image.kernel_version in res.stdout.decode()


def test_a_command_off_the_allowlist_is_refused(rt) -> None:
    with pytest.raises(CapabilityDenied, match="not on the guest's allowlist"):
        call(rt, "insmod", ["/lib/modules/virtio.ko"])  # /sbin: never allowed
    with pytest.raises(CapabilityDenied, match="not on the guest's allowlist"):
        call(rt, "/tmp/w/x", [])
    res = call(rt, "sh", ["-c", "cp /bin/busybox /tmp/w/busybox && /tmp/w/busybox id -u; echo rc=$?"])
    # a copied binary still runs as the unprivileged uid: the allowlist names what the host may start
    assert b"1000" in res.stdout


def test_the_guest_user_cannot_reach_the_host_channel(rt) -> None:
    script = ("ls -l /dev/vport* ; echo x > /dev/vport1p1; echo rc=$?; cat /etc/wb/allowed >/dev/null; "
              "echo > /etc/wb/allowed; echo rc2=$?")
    res = call(rt, "sh", ["-c", script])
    out = res.stdout.decode() + res.stderr.decode()
    assert "rc=0" not in out and "rc2=0" not in out


def test_a_wasm_command_is_not_run_here(rt) -> None:
    art = rt.artifacts.put_bytes(b"\0asm\x01\0\0\0")
    req = TestMicrovmConformance().request(rt, "sh", [])
    import dataclasses

    with pytest.raises(InvalidArgs, match="runs posix commands"):
        MicrovmTier(rt).call(dataclasses.replace(req, sha256=art.sha256,
                                                 artifact=rt.artifacts.path(art.sha256)))


def test_cancel_kills_the_vm(rt) -> None:
    import threading

    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="cancelled"):
        call(rt, "sh", ["-c", "sleep 30"], timeout_s=20.0, cancel=cancel)
    assert time.monotonic() - t0 < 3.0


def test_the_host_watchdog_tears_the_vm_down(rt, snapshot, monkeypatch) -> None:
    """A guest whose agent never answers (here: the agent's own deadline pushed far past the
    host's) ends at the host's deadline + grace: QEMU is SIGKILLed."""
    orig = tiers._Call.send_exec

    def lying(self, vm, deadline):
        orig(self, vm, deadline + 60)  # the guest is told it has a minute more

    monkeypatch.setattr(tiers._Call, "send_exec", lying)
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="micro-VM was killed"):
        call(rt, "sh", ["-c", "while :; do :; done"], timeout_s=2.0)
    assert time.monotonic() - t0 < 2.0 + tiers.GRACE_S + 1.0


# --- the protocol, straight to a restored guest agent ---------------------------------------------


class Agent:
    """A VM restored from the snapshot and its raw channel."""

    def __init__(self, snap: tiers.Snapshot) -> None:
        self.snap = snap
        self.vm = _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path)
        self.vm.connect(time.monotonic() + 30)

    def recv(self, timeout: float = 20.0):
        return self.vm.recv(time.monotonic() + timeout)

    def refused(self, timeout: float = 20.0) -> dict:
        kind, payload = self.recv(timeout)
        assert kind == frames.REFUSED, frames.name(kind)
        return frames.unpack(payload)[0]

    def exec_(self, secret: bytes | None, argv=("sh", "-c", "echo ran")) -> bytes:
        obj = {"id": 7, "argv": list(argv), "deadline_ms": 5000}
        if secret is None:
            return frames.encode(frames.EXEC, frames.pack(obj, b""))
        return frames.seal(frames.EXEC, secret, obj, b"")


@pytest.fixture
def agent(snapshot):
    a = Agent(snapshot)
    yield a
    a.vm.kill()


def test_secret_required(agent) -> None:
    a = agent
    a.vm.send_frame(a.exec_(a.snap.secret))  # before any Ping: refused
    assert a.refused()["reason"] == "unexpected"
    a.vm.send_frame(frames.ping(bytes(32)))
    assert a.refused()["reason"] == "secret"
    a.vm.send_frame(frames.encode(frames.PING, a.snap.secret[:16]))
    assert a.refused()["reason"] == "secret"
    # a seed of the wrong size: the whole Ping is refused
    a.vm.send_frame(frames.encode(frames.PING, a.snap.secret + struct.pack("<H", frames.VERSION) + b"s" * 31))
    assert a.refused()["reason"] == "secret"
    a.vm.send_frame(frames.ping(a.snap.secret, seed=os.urandom(frames.SEED_BYTES)))
    kind, payload = a.recv()
    assert kind == frames.PONG and frames.check_pong(payload) == frames.VERSION
    a.vm.send_frame(a.exec_(None))  # no secret in the Exec
    assert a.refused()["reason"] == "secret"
    a.vm.send_frame(a.exec_(os.urandom(32)))  # another secret
    assert a.refused()["reason"] == "secret"
    a.vm.send_frame(frames.encode(frames.SHUTDOWN, os.urandom(32)))
    assert a.refused()["reason"] == "secret"
    a.vm.send_frame(a.exec_(a.snap.secret))
    kind, payload = a.recv()
    _, blobs = frames.unpack(payload)
    assert kind == frames.EXEC_RESULT and blobs[0] == b"ran\n"


def test_malformed_frames_are_refused_without_a_crash(agent) -> None:
    a = agent
    a.vm.send_frame(frames.ping(a.snap.secret))
    assert a.recv()[0] == frames.PONG
    secret_hex = a.snap.secret.hex()
    bad = [
        struct.pack("<IB", 0, 0x42),  # unknown type
        frames.encode(frames.EXEC, b""),  # empty payload
        frames.encode(frames.EXEC, b"\xff\xff\xff\x7f{}"),  # json length past the payload
        frames.encode(frames.EXEC, struct.pack("<I", 5) + b"[1,2]"),  # not an object
        frames.encode(frames.EXEC, struct.pack("<I", 9) + b'{"a":"\\q"}'[:9]),  # bad escape
        frames.encode(frames.EXEC, frames.pack({"secret": secret_hex, "argv": "sh"}, b"")),  # argv not a list
        frames.encode(frames.EXEC, frames.pack({"secret": secret_hex, "argv": []}, b"")),  # empty argv
        frames.encode(frames.EXEC, frames.pack({"secret": secret_hex, "argv": ["sh"]})),  # no stdin blob
        # blobs short
        frames.encode(frames.EXEC, frames.pack({"secret": secret_hex, "argv": ["sh"]}, b"x")[:-1]),
        frames.encode(frames.EXEC, struct.pack("<I", 2000) + b'{"x":' + b"[" * 1990 + b"1"),  # deep nesting
        # too long
        frames.encode(frames.EXEC, frames.pack({"secret": secret_hex, "argv": ["sh"] * 5000}, b"")),
    ]
    for frame in bad:
        a.vm.send_frame(frame)
        assert a.refused()["reason"] in ("malformed", "unknown-type", "secret"), frame[:40]
    # still serving, in step
    a.vm.send_frame(a.exec_(a.snap.secret, ("sh", "-c", "echo alive")))
    kind, payload = a.recv()
    assert kind == frames.EXEC_RESULT and frames.unpack(payload)[1][0] == b"alive\n"
    # a lying length over the cap: refused, and the agent drops the stream (the host reconnects)
    a.vm.send_frame(struct.pack("<IB", frames.MAX_FRAME + 1, frames.EXEC))
    assert a.refused()["reason"] == "too-large"


def test_accelerator_probe_is_recorded(snapshot) -> None:
    record = json.loads((CACHE / "accel.json").read_text())
    assert snapshot.accel in record.values()
    if not _vm.kvm_openable():
        assert snapshot.accel == "tcg"


def test_a_restored_qemu_is_sandboxed_and_unprivileged(agent) -> None:
    pid = agent.vm.proc.pid
    status = Path(f"/proc/{pid}/status").read_text()
    fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in status.splitlines()}
    assert Path(f"/proc/{pid}/exe").resolve().name.startswith("qemu-system")
    assert fields["Seccomp"][0] == "2"  # -sandbox on: a seccomp filter
    if os.geteuid() == 0 and agent.snap.accel == "tcg":
        assert fields["Uid"][0] == str(_vm.QEMU_UID) and fields["Groups"] == []
    assert (agent.vm.dir.stat().st_mode & 0o777) == 0o700


def test_a_posix_toolkit_runs_in_the_microvm_through_the_call_path(rt, wbx, toolkit_root) -> None:
    """With the posix shape installed (wbcore-container ships it), a posix toolkit asked for
    tier microvm runs there; ``wbx tiers`` lists the tier."""
    if "posix" not in rt.shapes.names():
        pytest.skip("the posix shape is not installed (pip install wbcore-container)")
    import hashlib

    from wbcore_runtime.build import builder
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    write_toolkit(toolkit_root, "hash", manifest_text("hash", exec="posix", extra={"CLI_BIN": "sha256sum"}))
    rt.discover(refresh=True)
    name = builder.build(rt, "hash").name
    data = os.urandom(50_000)
    res = rt.call(name, [], data, tier="microvm")
    assert res.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    assert res.usage.isolation in ("kvm", "tcg")
    r = wbx("run", "--tier", "microvm", name, runtime=rt, input=data)
    assert r.exit_code == 0 and r.stdout.split()[0] == hashlib.sha256(data).hexdigest(), r.stderr
    r = wbx("tiers", runtime=rt)
    line = next(ln for ln in r.stdout.splitlines() if " microvm " in ln)
    assert r.exit_code == 0 and f"accelerator {res.usage.isolation}" in line


def test_a_call_takes_a_restored_vm_from_the_pool_and_tears_it_down(rt, snapshot) -> None:
    p = tiers.pool(snapshot)
    if p.size == 0:
        pytest.skip("WB_MICROVM_POOL=0: no VM is restored ahead of calls")
    assert p.wait_ready(tiers.RESTORE_S)
    with p.lock:
        ready = p.ready[0]
    res = call(rt, "sh", ["-c", "echo pooled; echo x > /tmp/w/left-behind"])
    assert res.stdout == b"pooled\n"
    assert ready.proc.poll() is not None and not ready.dir.exists()  # one call per VM
    assert p.wait_ready(tiers.RESTORE_S)
    res = call(rt, "sh", ["-c", "ls /tmp/w; echo done"])
    assert res.stdout == b"done\n"  # the next call's guest never saw the last one's files


def test_random_frames_are_each_refused_and_the_agent_stays_in_step(agent) -> None:
    """A fuzz of the C agent: 300 frames of random type and random payload (≤ 2 KiB; some
    shaped like json payloads with a lying header length) — each gets exactly one Refused,
    and a good Exec after them still runs."""
    import random

    rnd = random.Random(13)
    a = agent
    a.vm.send_frame(frames.ping(a.snap.secret))
    assert a.recv()[0] == frames.PONG
    for i in range(300):
        kind = rnd.choice([frames.EXEC, frames.PING, frames.SHUTDOWN, frames.BROKER_ANSWER,
                           rnd.randrange(256)])
        body = rnd.randbytes(rnd.randrange(0, 2048))
        if i % 3 == 0:
            head = json.dumps({"argv": ["sh"], "secret": rnd.randbytes(32).hex(),
                               "x": "\\u00e9" * 3}).encode()
            body = struct.pack("<I", rnd.choice([len(head), len(head) + 5, 0xFFFFFFFF])) + head + body[:8]
        a.vm.send_frame(struct.pack("<IB", len(body), kind) + body)
        k2, p2 = a.recv()
        assert k2 == frames.REFUSED, (i, kind, body[:80], frames.name(k2), p2[:200])
        assert frames.unpack(p2)[0]["reason"] in (
            "malformed", "unknown-type", "secret", "unexpected", "version"), i
    # a Ping with a wrong secret (some were random) ends the session's authentication
    a.vm.send_frame(a.exec_(a.snap.secret, ("sh", "-c", "echo in step")))
    assert a.refused()["reason"] == "unexpected"
    a.vm.send_frame(frames.ping(a.snap.secret))
    assert a.recv()[0] == frames.PONG
    a.vm.send_frame(a.exec_(a.snap.secret, ("sh", "-c", "echo in step")))
    kind, payload = a.recv()
    assert kind == frames.EXEC_RESULT and frames.unpack(payload)[1][0] == b"in step\n"


def test_concurrent_calls_each_get_their_own_vm(rt) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> bytes:
        return call(rt, "sh", ["-c", f"echo {i} > /tmp/w/mine; sleep 1; cat /tmp/w/mine"],
                    timeout_s=30.0).stdout

    with ThreadPoolExecutor(3) as ex:
        outs = list(ex.map(one, range(3)))
    assert outs == [b"0\n", b"1\n", b"2\n"]


def test_a_bomb_the_size_of_the_guest_takes_only_itself(rt) -> None:
    """The posix profile's 256 MiB address space is the whole guest: the limit or the guest's
    OOM killer ends the command, never the agent (oom_score_adj -1000): the call still gets
    its answer (a failed command, or GuestTrap for a kill by signal)."""
    from wbcore_runtime.contract.calls import GuestTrap
    from wbcore_runtime.trust.policy import profile

    script = "x=a; i=0; while [ $i -lt 31 ]; do x=\"$x$x\"; i=$((i+1)); done; echo survived"
    try:
        res = call(rt, "sh", ["-c", script], profile=profile("posix"), timeout_s=60.0)
    except GuestTrap as exc:
        assert "signal 9" in str(exc)
    else:
        assert res.exit_code != 0 and b"survived" not in res.stdout


def test_big_output_fits_one_frame_and_the_cap_is_the_guests(rt) -> None:
    """The posix profile allows 64 MiB of stdout; one ExecResult carries at most
    ``OUTPUT_CAP`` of each stream, so that is the cap the call meets."""
    from wbcore_runtime.contract.calls import LimitExceeded
    from wbcore_runtime.trust.policy import profile

    with pytest.raises(LimitExceeded, match=f"{tiers.OUTPUT_CAP}-byte cap") as info:
        call(rt, "sh", ["-c", "head -c 40000000 /dev/zero"], profile=profile("posix"), timeout_s=60.0)
    assert info.value.limit == "stdout"
    res = call(rt, "sh", ["-c", "head -c 3000000 /dev/zero"], profile=profile("posix"), timeout_s=60.0)
    assert res.stdout == bytes(3_000_000)


def test_each_restored_vm_draws_its_own_randomness(rt) -> None:
    """Every VM is restored from one snapshot, so each starts with the same kernel RNG state:
    without the host's fresh seed in the handshake (mixed in and the CRNG reseeded by the
    agent), two calls reading /dev/urandom first thing would read the same bytes."""
    argv = ["-c", "head -c 32 /dev/urandom | od -An -tx1"]
    outs = [call(rt, "sh", argv, timeout_s=30.0).stdout for _ in range(3)]
    assert all(len(o.split()) == 32 for o in outs), outs
    assert len(set(outs)) == 3, outs
