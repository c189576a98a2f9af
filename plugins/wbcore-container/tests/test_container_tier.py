"""The container tier beyond the shared conformance suite (test_conformance.py): a call in a throwaway
bubblewrap container gives what the instance tier gives, within the same limits, and sees nothing of the host
— and a posix CLI from the Debian root runs only there."""

from __future__ import annotations

import hashlib
import os
import struct
import time
import zlib
from pathlib import Path

import pytest

from wbcore_container import bwrap, rootfs

pytestmark = pytest.mark.skipif(not bwrap.probe()[0],
                                reason=f"bubblewrap unavailable here: {bwrap.probe()[1]}")

from wbcore_runtime.build import builder  # noqa: E402
from wbcore_runtime.contract.calls import LimitExceeded  # noqa: E402
from wbcore_runtime.contract.errors import CapabilityDenied, NotFound, Timeout  # noqa: E402
from wbcore_testing.conformance import ECHO_WAT, command_request, kv_wat  # noqa: E402
from wbcore_testing.fixtures import manifest_text, write_toolkit  # noqa: E402

from wbcore_container.tiers import ContainerTier  # noqa: E402

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0


def needs_wasm() -> None:
    """The wasm rows build WAT and compare with the instance tier: both are wbcore-wasmtime's."""
    pytest.importorskip("wasmtime")
    pytest.importorskip("wbcore_wasmtime")


def wat_toolkit(root: Path, ident: str, wat: str) -> Path:
    fields = {"BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": ident}
    return write_toolkit(root, ident, manifest_text(ident, exec="command", extra=fields),
                         files={"src/main.wat": wat})


def posix_toolkit(root: Path, ident: str, cli: str) -> Path:
    return write_toolkit(root, ident, manifest_text(ident, exec="posix", extra={"CLI_BIN": cli}))


@pytest.fixture
def rt(make_runtime):
    return make_runtime()


def built(rt, toolkit_root: Path, ident: str, wat: str) -> str:
    wat_toolkit(toolkit_root, ident, wat)
    rt.discover(refresh=True)
    return builder.build(rt, ident).name


def posix(rt, toolkit_root: Path, ident: str, cli: str) -> str:
    posix_toolkit(toolkit_root, ident, cli)
    rt.discover(refresh=True)
    return builder.build(rt, ident).name


# --- wasm: the same answers as the instance tier ------------------------------------------------


def test_a_tampered_artifact_never_runs(rt, toolkit_root) -> None:
    needs_wasm()
    name = built(rt, toolkit_root, "tamper", ECHO_WAT)
    sha = rt.resolve("command", name).sha256
    path = rt.artifacts.path(sha)
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(Exception, match="(?i)integrity|tamper|does not match|sha256"):
        rt.call(name, [], b"x", tier="container")


# --- posix: a native CLI from the Debian root, only in the container ------------------------------


def test_posix_builds_a_manifest_and_runs_only_in_the_container(rt, wbx, toolkit_root) -> None:
    name = posix(rt, toolkit_root, "hash", "sha256sum")
    entry = rt.registry.lookup("command", name)
    assert entry.shape == "posix" and entry.options["provenance"]["trust"] == "first-party"
    assert builder.read_posix_manifest(rt.artifacts.read_verified(entry.sha256))["cli_bin"] == "sha256sum"
    resolved = rt.resolve("command", name)
    assert resolved.tier.name == "container" and "posix" in resolved.tier.reason
    data = os.urandom(100_000)
    r = wbx("run", name, runtime=rt, input=data)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    for weaker in ("instance", "os_process"):
        if weaker == "os_process" and "os_process" not in rt.tiers.names():
            continue
        with pytest.raises(CapabilityDenied, match="posix commands run only in container"):
            rt.call(name, [], b"", tier=weaker)
    r = wbx("tiers", "--explain", "hash", runtime=rt)
    assert r.exit_code == 0 and "container" in r.stdout
    r = wbx("toolkit", "verify", "hash", runtime=rt)
    assert "runs in tier container" in r.stdout + r.stderr


def test_posix_cli_is_resolved_inside_the_root_not_on_the_host_path(rt, toolkit_root, tmp_path) -> None:
    bindir = tmp_path / "hostbin"
    bindir.mkdir()
    (bindir / "hostonly").write_text("#!/bin/sh\necho ran on the host\n")
    (bindir / "hostonly").chmod(0o755)
    name = posix(rt, toolkit_root, "hostonly", "hostonly")
    with pytest.raises(NotFound, match="not in the container root"):
        rt.call(name, [], b"")
    assert rootfs.resolve_cli("../bin/sh") is None and rootfs.resolve_cli("/usr/bin/sh") is None


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(rootfs.resolve_cli("convert") is None,
                    reason="imagemagick is not installed (apt-get install imagemagick)")
def test_imagemagick_converts_a_generated_ppm_to_png(rt, wbx, toolkit_root) -> None:
    name = posix(rt, toolkit_root, "im", "convert")
    w, h = 64, 48
    pixels = b"".join(bytes((x * 4 % 256, y * 5 % 256, (x + y) % 256)) for y in range(h) for x in range(w))
    ppm = f"P6 {w} {h} 255\n".encode() + pixels
    r = wbx("run", name, "ppm:-", "png:-", runtime=rt, input=ppm)
    assert r.exit_code == 0, r.stderr
    png = r.stdout_bytes
    assert png.startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert (width, height) == (w, h)
    assert zlib.crc32(png[12:29]) == struct.unpack(">I", png[29:33])[0]


# --- posix: the container holds ------------------------------------------------------------------


def shell(rt, toolkit_root, script: str, timeout: float | None = None, stdin: bytes = b""):
    name = posix(rt, toolkit_root, "sh", "sh")
    return rt.call(name, ["-c", script], stdin, timeout=timeout)


def test_no_network(rt, toolkit_root) -> None:
    res = shell(rt, toolkit_root, "cat /proc/net/dev; python3 -c \"import socket; s=socket.socket(); "
                                  "s.settimeout(2); s.connect(('1.1.1.1', 80))\"; echo exit=$?")
    ifaces = [ln.split(":")[0].strip()
              for ln in res.stdout.decode().splitlines() if ":" in ln and "|" not in ln]
    assert ifaces == ["lo"]
    # refused by the seccomp filter (no AF_INET socket) or, without it, by the empty net namespace
    err = res.stderr.decode()
    assert (("Address family not supported" in err or "Network is unreachable" in err)
            and "exit=1" in res.stdout.decode())


def test_no_host_file_is_visible(rt, toolkit_root, wb_home) -> None:
    res = shell(rt, toolkit_root,
                f"ls {wb_home} /root /home /etc/shadow /work /var 2>&1; echo etc: $(ls /etc); id -u")
    out = res.stdout.decode()
    for path in (str(wb_home), "/root", "/home", "/etc/shadow", "/work", "/var"):
        assert f"cannot access '{path}': No such file or directory" in out
    etc = next(line for line in out.splitlines() if line.startswith("etc: ")).split()[1:]
    assert sorted(etc) == ["gitconfig", "group", "hosts", "ld.so.cache", "nsswitch.conf", "passwd"]
    assert out.split()[-1] == str(rootfs.UID)


def test_root_is_read_only_and_tmp_is_capped(rt, toolkit_root) -> None:
    res = shell(rt, toolkit_root, "touch /usr/x 2>&1; echo hi > /tmp/ok && cat /tmp/ok; "
                                  "head -c 100000000 /dev/zero > /tmp/big; echo big=$?")
    out = res.stdout.decode()
    assert "Read-only file system" in out and "hi" in out and "big=0" not in out


def test_posix_deadline_kills_the_whole_container(rt, toolkit_root) -> None:
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="deadline"):
        shell(rt, toolkit_root, "sleep 100 & sleep 100 & while :; do :; done", timeout=1.0)
    assert time.monotonic() - t0 < 1.0 + SLACK_S
    assert not _host_processes_of(bwrap.HOST_UID), _ps(bwrap.HOST_UID)


@pytest.mark.slow
def test_posix_fork_bomb_is_contained(rt, toolkit_root) -> None:
    t0 = time.monotonic()
    try:
        res = shell(rt, toolkit_root, "b() { b | b & }; b; sleep 1; echo survived", timeout=5.0)
        out = res.stdout.decode() + res.stderr.decode()
        assert "fork" in out.lower() or "resource" in out.lower()
    except Timeout:
        pass
    assert time.monotonic() - t0 < 5.0 + 1.0
    assert not _host_processes_of(bwrap.HOST_UID), _ps(bwrap.HOST_UID)


def test_posix_memory_bomb_is_refused(rt, toolkit_root) -> None:
    res = shell(rt, toolkit_root, "python3 -c 'x = bytearray(1 << 30); print(len(x))'")
    assert res.exit_code != 0 and b"MemoryError" in res.stderr


def test_posix_output_flood_stops_at_the_cap(rt, toolkit_root) -> None:
    name = posix(rt, toolkit_root, "yes", "yes")
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded, match="stdout passed") as info:
        rt.call(name, [], b"", timeout=30)
    assert info.value.limit == "stdout" and time.monotonic() - t0 < 20


def test_cancel_kills_the_container(rt, toolkit_root) -> None:
    import threading

    name = posix(rt, toolkit_root, "sh", "sh")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="cancelled"):
        rt.call(name, ["-c", "sleep 30"], b"", timeout=20, cancel=cancel)
    assert time.monotonic() - t0 < 0.3 + SLACK_S


def _kv_request(rt, wat: str, **kw):
    import wasmtime

    from wbcore_runtime.trust.policy import profile

    fields = {"profile": profile("minimal"), "timeout_s": 10.0, "caps": frozenset({"kv"}), **kw}
    return command_request(rt, wasmtime.wat2wasm(wat), **fields)


def test_an_ungranted_cap_is_refused_before_the_guest_runs(rt) -> None:
    needs_wasm()
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import cbor2

    req = _kv_request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})), caps=frozenset())
    with pytest.raises(CapabilityDenied, match="kv"):
        ContainerTier(rt).call(req)
    odd = """(module (import "env" "open" (func $o (param i32) (result i32)))
      (memory (export "memory") 1) (func (export "_start")))"""
    with pytest.raises(CapabilityDenied, match="may import only"):
        ContainerTier(rt).call(_kv_request(rt, odd))


def test_posix_with_the_container_unavailable_says_why(make_runtime, toolkit_root, monkeypatch) -> None:
    from wbcore_runtime.contract.drivers import Availability
    from wbcore_runtime.contract.errors import Unavailable

    from wbcore_container import tiers

    rt = make_runtime()
    name = posix(rt, toolkit_root, "hash", "sha256sum")
    monkeypatch.setattr(tiers, "available",
                        lambda: Availability.no("bwrap is not on PATH (install it: apt-get install "
                                                "bubblewrap)"))
    rt = make_runtime()
    stronger = [t for t in rt.tiers if t.name != "container" and "posix" in t.kinds and t.available().ok]
    if stronger:  # e.g. microvm installed: posix goes to the next rung that runs it, saying why
        choice = rt.resolve("command", name).tier
        assert choice.name == stronger[0].name
        assert dict(choice.considered)["container"].startswith("unavailable: bwrap is not on PATH")
        return
    with pytest.raises(Unavailable,
                       match="runs only in container, and container: unavailable: bwrap is not on PATH"):
        rt.call(name, [], b"")


def test_a_request_of_another_type_is_refused(rt) -> None:
    from wbcore_runtime.contract.errors import InvalidArgs

    with pytest.raises(InvalidArgs, match="commands only"):
        ContainerTier(rt).call(object())


def test_limits_are_within_the_host_hard_limits(rt, toolkit_root) -> None:
    import resource

    res = shell(rt, toolkit_root, "cat /proc/self/limits")
    limits = {line[:26].strip(): line[26:].split()[0] for line in res.stdout.decode().splitlines()[1:]}
    assert int(limits["Max open files"]) <= min(bwrap.NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    assert int(limits["Max processes"]) <= 64 and int(limits["Max core file size"]) == 0
    assert int(limits["Max address space"]) <= rt.resolve("command", "sh").profile.memory_bytes
    assert int(limits["Max cpu time"]) <= 10


def _host_processes_of(uid: int) -> list[int]:
    """Live processes of ``uid`` on the host, after a short grace (the pid namespace dies
    asynchronously; an exited zombie left for the host's init to reap holds nothing)."""
    end = time.monotonic() + 2.0
    while True:
        live = [pid for pid in _pids_of(uid) if _state(pid) not in ("Z", "")]
        if not live or time.monotonic() > end:
            return live
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _pids_of(uid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                out.append(int(pid))
        except OSError:
            continue
    return out


def _ps(uid: int) -> str:
    out = []
    for pid in _host_processes_of(uid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
            out.append(f"{pid}: {cmd!r} {Path(f'/proc/{pid}/stat').read_text().split()[2:4]}")
        except OSError:
            continue
    return "; ".join(out)


def test_seccomp_denies_the_kernel_surface(rt, toolkit_root) -> None:
    from wbcore_container import seccomp

    if seccomp.bpf() is None:
        pytest.skip("pyseccomp is not installed")
    script = ("import ctypes, os, socket\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "print('unshare', libc.unshare(0x20000), ctypes.get_errno())\n"
              "print('ptrace', libc.ptrace(0, 0, 0, 0), ctypes.get_errno())\n"
              "try:\n    socket.socket(socket.AF_INET6)\nexcept OSError as e:\n    print('inet6', e.errno)\n"
              "socket.socket(socket.AF_UNIX).close(); print('unix ok')\n")
    res = shell(rt, toolkit_root, f"python3 -c \"{script}\"")
    out = res.stdout.decode()
    assert ("unshare -1 1" in out and "ptrace -1 1" in out and "inet6 97" in out
            and "unix ok" in out), res.stderr


def test_the_deadline_holds_while_a_bridged_broker_blocks(rt) -> None:
    needs_wasm()
    pytest.importorskip("wbcore_brokers_state",
                        reason="the kv broker (wbcore-brokers-state) is not installed")
    import threading

    import cbor2

    release = threading.Event()

    class Stuck:
        def handle(self, call):
            release.wait(30)
            return {}

    rt.dock.set_driver("kv", Stuck())
    try:
        req = _kv_request(rt, kv_wat(cbor2.dumps({"op": "get", "key": "k"})), timeout_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(Timeout, match="deadline"):
            ContainerTier(rt).call(req)
        assert time.monotonic() - t0 < 1.0 + SLACK_S
    finally:
        release.set()
