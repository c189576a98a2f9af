"""The build sandbox: what a sandboxed program can and cannot reach, and its limits."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from wbcore_process.sandbox import Bind, SandboxLimits, Sandbox, SandboxUnavailable, probe, system_binds
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

ok, reason, _ = probe()
pytestmark = pytest.mark.skipif(not ok, reason=f"sandbox unavailable here: {reason}")


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return Sandbox()


def sh(box: Sandbox, script: str, out: Path, **kw):
    return box.run(["/bin/sh", "-c", script], binds=system_binds() + list(kw.pop("binds", [])), out_dir=out,
                   **kw)


def test_runs_as_unprivileged_uid_with_files_copied_out(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "id -u; hostname; mkdir /out/sub; printf hi > /out/sub/a.txt; ln -s /etc/passwd /out/link",
             tmp_path / "o")
    assert res.ok, res.log
    assert res.stdout.decode().split() == ["1000", "wb-sandbox"]
    assert (tmp_path / "o" / "sub" / "a.txt").read_text() == "hi"
    assert not (tmp_path / "o" / "link").exists()  # links never leave /out
    assert "link" in res.skipped
    assert "ns:net" in res.features and "rlimits" in res.features


def test_host_files_outside_binds_are_invisible(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    res = sh(box, f"cat /etc/passwd; cat {secret}; ls /root /home", tmp_path / "o")
    assert res.returncode != 0
    assert b"root:" not in res.stdout and b"top secret" not in res.stdout


def test_source_bind_is_read_only(box: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text("int main(){}")
    res = sh(box, "cat /src/main.c; echo x > /src/main.c || echo refused", tmp_path / "o",
             binds=[Bind(src, "/src")])
    assert b"int main" in res.stdout and b"refused" in res.stdout
    assert (src / "main.c").read_text() == "int main(){}"


def test_no_network_at_all(box: Sandbox, tmp_path: Path) -> None:
    script = (
        "import socket\n"
        "for fam in (socket.AF_INET, socket.AF_INET6):\n"
        "    try:\n"
        "        s = socket.socket(fam, socket.SOCK_STREAM); s.connect(('127.0.0.1' if fam == socket.AF_INET "
        "else '::1', 22))\n        print('CONNECTED')\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n"
    )
    res = box.run(["/usr/bin/python3", "-c", script], binds=system_binds(), out_dir=tmp_path / "o")
    assert b"CONNECTED" not in res.stdout
    assert res.stdout.count(b"refused") == 2


def test_writes_outside_out_and_tmp_fail(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "touch /usr/x || echo usr-ro; touch /x || echo root-ro; touch /tmp/ok && echo tmp-ok",
             tmp_path / "o")
    assert res.stdout.decode().split() == ["usr-ro", "root-ro", "tmp-ok"]


def test_wall_clock_deadline_kills_everything(box: Sandbox, tmp_path: Path) -> None:
    marker = tmp_path / "o"
    start = time.monotonic()
    res = sh(box, "(sleep 30 &) ; sleep 30", marker, limits=SandboxLimits(wall_seconds=1.0))
    assert res.timed_out and res.limit == "wall-clock"
    assert time.monotonic() - start < 10
    with pytest.raises(Timeout):
        res.check()


def test_cpu_limit(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "while :; do :; done", tmp_path / "o", limits=SandboxLimits(cpu_seconds=1, wall_seconds=20))
    assert res.limit == "cpu" and not res.ok


def test_fork_bomb_ends_at_process_limit(box: Sandbox, tmp_path: Path) -> None:
    script = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n, e.errno)\n"
    )
    res = box.run(["/usr/bin/python3", "-c", script], binds=system_binds(), out_dir=tmp_path / "o",
                  limits=SandboxLimits(processes=16, wall_seconds=20))
    words = res.stdout.split()
    assert words[0] == b"stopped" and int(words[1]) < 16, res.log
    assert res.duration < 15  # the sleepers were killed with the namespace, not waited for


def test_file_size_and_output_caps(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "head -c 2000000 /dev/zero > /out/big", tmp_path / "o",
             limits=SandboxLimits(file_size=1 << 20))
    assert not res.ok
    res = sh(box, "head -c 300000 /dev/zero > /out/a; head -c 300000 /dev/zero > /out/b", tmp_path / "o2",
             limits=SandboxLimits(out_bytes=400_000))
    assert not res.ok
    with pytest.raises(InvalidArgs):
        res.check()


def test_captured_output_is_capped(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "head -c 5000000 /dev/zero", tmp_path / "o", limits=SandboxLimits(output_bytes=1000))
    assert res.ok and len(res.stdout) == 1000 and res.stdout_truncated


def test_stdin_is_passed(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "tr a-z A-Z", tmp_path / "o", stdin=b"hello")
    assert res.stdout == b"HELLO"


def test_failure_carries_the_programs_message(box: Sandbox, tmp_path: Path) -> None:
    res = sh(box, "echo 'main.c:1: error: boom' >&2; exit 3", tmp_path / "o")
    with pytest.raises(InvalidArgs, match="main.c:1: error: boom"):
        res.check("cc")


def test_seed_out_starts_writable(box: Sandbox, tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "in.txt").write_text("abc")
    res = sh(box, "cat /out/in.txt /out/in.txt > /out/t; mv /out/t /out/in.txt", tmp_path / "o",
             seed_out=seed)
    assert res.ok, res.log
    assert (tmp_path / "o" / "in.txt").read_text() == "abcabc"
    assert (seed / "in.txt").read_text() == "abc"


def test_bad_arguments_are_refused(box: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgs):
        box.run(["sh"], out_dir=tmp_path)
    with pytest.raises(InvalidArgs):
        box.run(["/bin/sh"], binds=[Bind(tmp_path, "/out")], out_dir=tmp_path)


def test_host_untouched_after_escape_attempts(box: Sandbox, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("same")
    before = sorted(os.listdir(tmp_path))
    sh(box,
       f"rm -rf {tmp_path}; echo x > {canary}; unshare -U true && echo UNSHARED; mount -t tmpfs x /tmp && "
       "echo MOUNTED",
       tmp_path / "o")
    assert canary.read_text() == "same"
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["o"])


def test_unavailable_sandbox_names_the_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    import wbcore_process.sandbox as sb

    monkeypatch.setattr(sb, "probe",
                        lambda: (False, "user namespaces are disabled (sysctl user.max_user_namespaces=0)",
                                 ()))
    with pytest.raises(SandboxUnavailable,
                       match="the build sandbox is unavailable: user namespaces are disabled"):
        sb.Sandbox()


def test_overlay_bind_writes_vanish(box: Sandbox, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "hit").write_text("cached\n")
    res = sh(box, "cat /cache/hit; echo new > /cache/added; echo more >> /cache/hit; cat /cache/added",
             tmp_path / "o", binds=[Bind(cache, "/cache", overlay=True)])
    assert res.ok, res.log
    assert res.stdout.split() == [b"cached", b"new"]
    assert sorted(os.listdir(cache)) == ["hit"] and (cache / "hit").read_text() == "cached\n"


def test_seccomp_filter_is_installed(box: Sandbox, tmp_path: Path) -> None:
    if "seccomp" not in box.features:
        pytest.skip("pyseccomp/libseccomp not loadable here")
    res = sh(box, "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status", tmp_path / "o")
    status = dict(line.split(":\t") for line in res.stdout.decode().splitlines())
    assert status == {"Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0000000000000000"}


def test_concurrent_sandboxes_do_not_interfere(box: Sandbox, tmp_path: Path) -> None:
    import threading

    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = sh(box, f"echo {i} > /out/n; cat /out/n", tmp_path / f"o{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(6):
        res = results[i]
        assert res.ok and res.stdout == f"{i}\n".encode(), res.log  # type: ignore[attr-defined]
        assert (tmp_path / f"o{i}" / "n").read_text() == f"{i}\n"


def test_a_missing_namespace_is_named(tmp_path: Path) -> None:
    """Run the init under a seccomp filter that refuses CLONE_NEWNET: the error names 'net'."""
    import subprocess
    import sys

    script = (
        "import errno, pyseccomp as sc\n"
        "f = sc.SyscallFilter(sc.ALLOW)\n"
        "f.add_rule(sc.ERRNO(errno.EPERM), 'unshare', sc.Arg(0, sc.MASKED_EQ, 0x40000000, 0x40000000))\n"
        "f.load()\n"
        "from pathlib import Path\n"
        "from wbcore_process.sandbox import Sandbox, SandboxUnavailable, system_binds\n"
        "try:\n"
        "    Sandbox(_probing=True).run(['/bin/true'], binds=system_binds(), "
        "out_dir=Path(__import__('sys').argv[1]))\nexcept SandboxUnavailable as e:\n"
        "    print(e.message)\n"
    )
    pytest.importorskip("pyseccomp")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "o")], capture_output=True, text=True,
                         timeout=60)
    assert "missing: net namespace" in out.stdout, out.stdout + out.stderr


def test_the_served_driver_is_the_sandbox_with_the_cores_one_run() -> None:
    """``run`` (signature, defaults) is the core's; the sandbox and the driver a lane gets
    implement only ``execute``, so the two cannot drift apart."""
    from wbcore_runtime.contract.sandbox import BuildSandboxDriver

    from wbcore_process.sandbox import Sandbox, SandboxDriver

    assert issubclass(SandboxDriver, Sandbox) and issubclass(Sandbox, BuildSandboxDriver)
    assert Sandbox.run is BuildSandboxDriver.run and SandboxDriver.run is BuildSandboxDriver.run
    assert SandboxDriver.execute is Sandbox.execute
