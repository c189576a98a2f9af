"""Build the shipped WAT toolkits with `wbx toolkit build` and run them through `wbx`."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from wbcore_runtime.build import builder
from wbcore_runtime.store.artifacts import IntegrityError
from wbcore_runtime.contract.errors import InvalidArgs

TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"


@pytest.fixture
def rt(make_runtime):
    return make_runtime(roots=[TOOLKITS])


def test_build_b64_then_run_it(rt, wbx):
    r = wbx("toolkit", "build", "b64", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "compile" in r.stderr and "register command b64" in r.stderr
    r = wbx("run", "b64", runtime=rt, input=b"hello")
    assert (r.exit_code, r.stdout_bytes) == (0, b"aGVsbG8=\n")
    blob = bytes(range(256)) * 40 + b"xy"
    enc = rt.call("b64", [], blob).stdout
    assert enc == base64.b64encode(blob) + b"\n"
    assert rt.call("b64", ["decode"], enc).stdout == blob
    assert rt.call("b64", ["-d"], b"aGVs\nbG8=\n").stdout == b"hello"
    bad = rt.call("b64", ["decode"], b"aGV$bG8=")
    assert bad.exit_code == 1 and b"at byte 3" in bad.stderr
    r = wbx("run", "b64", "decode", runtime=rt, input=b"!!")
    assert r.exit_code == 1  # the command's own exit code passes through
    assert rt.call("b64", ["--bogus"]).exit_code == 2


def test_run_grammar_wbx_options_before_the_name_the_programs_after(rt, wbx):
    """``wbx run [wbx options] NAME [--] [ARGS…]``: one ``--`` after NAME is the separator; a word
    spelled like wbx's own option after NAME goes to the program, with one note saying so."""
    assert wbx("toolkit", "build", "b64", runtime=rt).exit_code == 0
    r = wbx("run", "b64", "--", "decode", runtime=rt, input=b"aGVsbG8=")
    assert (r.exit_code, r.stdout_bytes, r.stderr) == (0, b"hello", "")
    r = wbx("run", "--tier", "instance", "--timeout", "5", "b64", runtime=rt, input=b"hi")
    assert (r.exit_code, r.stdout_bytes) == (0, b"aGk=\n"), r.stderr
    r = wbx("run", "b64", "--tier", "instance", runtime=rt, input=b"hi")
    assert r.exit_code == 2  # b64 itself refuses the option it was handed
    assert r.stderr.count("wbx: note: --tier after the command name is passed to the program") == 1, r.stderr
    assert "wbx run --tier … NAME" in r.stderr
    r = wbx("run", "b64", "--", "--tier", runtime=rt, input=b"hi")
    assert r.exit_code == 2 and "note" not in r.stderr  # after the separator, no note: the user said so
    r = wbx("run", "-v", "--tier", "instance", "b64", runtime=rt, input=b"hi")
    assert r.exit_code == 0 and r.stdout_bytes == b"aGk=\n"
    assert r.stderr.startswith("wbx: b64: tier instance, ") and " ms wall" in r.stderr, r.stderr


def test_unchanged_toolkit_rebuilds_from_cache(rt):
    first = builder.build(rt, "b64")
    second = builder.build(rt, "b64")
    assert not first.cached and second.cached and first.sha256 == second.sha256
    assert "[cache] hit" in second.log_path.read_text()
    assert builder.build(rt, "b64", force=True).cached is False


def test_build_checksum_kernel_one_shot_and_stream(rt, wbx):
    r = wbx("toolkit", "build", "checksum", runtime=rt)
    assert r.exit_code == 0, r.stderr
    entry = rt.registry.get("kernel", "crc32")
    assert entry.options["in_off"] == 65536 and entry.options["out_off"] == 8454144
    r = wbx("kernel", "run", "crc32", runtime=rt, input=b"hello")
    assert r.stdout_bytes == f"{zlib.crc32(b'hello'):08x}".encode()
    blobs = [b"", b"a", b"hello world", bytes(range(256)) * 1000]
    frames = b"".join(struct.pack("<I", len(b)) + b for b in blobs)
    r = wbx("kernel", "run", "crc32", "--stream", runtime=rt, input=frames)
    assert r.exit_code == 0, r.stderr
    out, got = r.stdout_bytes, []
    while out:
        (n,) = struct.unpack("<I", out[:4])
        got.append(out[4:4 + n])
        out = out[4 + n:]
    assert got == [f"{zlib.crc32(b):08x}".encode() for b in blobs]
    r = wbx("kernel", "run", "crc32", "--stream", runtime=rt, input=frames[:-3])
    assert r.exit_code == 2 and "truncated frame" in r.stderr
    # answers before the bad frame
    assert r.stdout_bytes == b"".join(struct.pack("<I", 8) + g for g in got[:-1])
    with rt.kernel("crc32") as k, pytest.raises(InvalidArgs, match="input arena"):
        k.call(b"\0" * (8 << 20 + 1))


def test_sha256_pin_is_checked_at_build_and_run(rt, make_toolkit, make_runtime, toolkit_root):
    src = (TOOLKITS / "b64" / "src" / "b64.wat").read_text()
    extra = {"BUILD_LANG": "wat", "BUILD_SRC": "path:src/b64.wat", "CLI_BIN": "b64pin", "SHA256": "0" * 64}
    make_toolkit("pinned", exec="command", extra=extra, files={"src/b64.wat": src})
    rt2 = make_runtime(roots=[toolkit_root])
    with pytest.raises(IntegrityError, match="does not match #\\+SHA256"):
        builder.build(rt2, "pinned")
    assert rt2.registry.lookup("command", "b64pin") is None


def test_build_failure_shows_the_log(make_toolkit, make_runtime, toolkit_root, wbx):
    make_toolkit("broken", exec="command", files={"src/main.wat": "(module (func $f (result i32)))"},
                 extra={"BUILD_LANG": "wat", "BUILD_SRC": "path:src", "CLI_BIN": "broken"})
    rt2 = make_runtime(roots=[toolkit_root])
    r = wbx("toolkit", "build", "broken", runtime=rt2)
    assert r.exit_code == 2 and "wat lane: main.wat" in r.stderr
    log = (rt2.home / "build" / "logs" / "broken.log").read_text()
    assert "[error]" in log and "wat lane" in log


def test_reserved_name_cannot_be_shadowed_by_a_build(make_toolkit, make_runtime, toolkit_root):
    make_toolkit("fake-upper", exec="command",
                 files={"src/u.wat": (TOOLKITS / "b64" / "src" / "b64.wat").read_text()},
                 extra={"BUILD_LANG": "wat", "BUILD_SRC": "path:src/u.wat", "CLI_BIN": "upper"})
    rt2 = make_runtime(roots=[toolkit_root])
    with pytest.raises(InvalidArgs, match="reserved built-in"):
        builder.build(rt2, "fake-upper")
    assert rt2.call("upper", [], b"still real").stdout == b"STILL REAL"


def test_wbx_run_unknown_and_timeout_exit_codes(rt, wbx):
    r = wbx("run", "no-such-cmd", runtime=rt)
    assert r.exit_code == 127 and "unknown command" in r.stderr
    r = wbx("run", "upper", runtime=rt, input=b"abc")
    assert (r.exit_code, r.stdout_bytes) == (0, b"ABC")


def test_build_json_and_which(rt, wbx):
    import json

    r = wbx("toolkit", "build", "b64", "--json", runtime=rt)
    assert r.exit_code == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]  # one JSON object per line
    assert ([e["event"] for e in events[:-1]] == ["phase"] * (len(events) - 1)
            and events[-1]["event"] == "result")
    assert {e["phase"] for e in events[:-1]} >= {"resolve", "compile", "store", "register"}
    out = events[-1]
    assert (out["kind"] == "command" and out["name"] == "b64" and out["lane"] == "wat"
            and len(out["sha256"]) == 64)
    r = wbx("toolkit", "build", "b64", "widget", runtime=rt)
    assert r.exit_code == 2 and "choose one of" in r.stderr
    r = wbx("toolkit", "build", "toolkit-authoring", runtime=rt)
    assert r.exit_code == 2 and "does not build a registered artifact" in r.stderr


def test_run_json_reports_the_result_and_its_usage(rt, wbx, tmp_path):
    """``wbx run --json``: one JSON object (exit code, stdout or stdout_base64, stderr, usage with
    the tier), or the error's kind and message; the exit code is the same either way."""
    import json
    import os
    import subprocess
    import sys

    from wbcore_cli import fastrun

    assert wbx("toolkit", "build", "b64", runtime=rt).exit_code == 0
    r = wbx("run", "--json", "--tier", "instance", "b64", "decode", runtime=rt, input=b"AP8=")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    # not text: base64
    assert out["exit_code"] == 0 and out["stdout_base64"] == "AP8=" and "stdout" not in out
    assert (out["usage"]["tier"] == "instance" and out["usage"]["wall_s"] > 0
            and out["usage"]["bytes_out"] == 2)
    r = wbx("run", "--json", "b64", "decode", runtime=rt, input=b"!!")
    # the command's own code passes through
    assert r.exit_code == 1 and json.loads(r.stdout)["exit_code"] == 1
    r = wbx("run", "--json", "no-such-command", runtime=rt)
    assert r.exit_code == 127 and json.loads(r.stdout)["error"]["kind"] == "not-found"
    # the fast path (no Typer) parses it too, in a process of its own
    assert fastrun.parse(["run", "--json", "upper"]).as_json
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")},
           "WB_HOME": str(tmp_path / "home")}
    wbx_bin = Path(sys.executable).with_name("wbx")
    p = subprocess.run([str(wbx_bin), "run", "--json", "upper"], input=b"hi", capture_output=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert (got["name"], got["stdout"], got["usage"]["tier"]) == ("upper", "HI", "instance")
