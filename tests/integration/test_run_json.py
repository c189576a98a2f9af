"""``wbx run --json``: one JSON object on stdout with the call's result and its usage — the
tier it ran at, its isolation, wall time, peak memory, fuel, bytes out — and the exit code,
which also passes through as wbx's own; errors are the same document with ``error``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from wbcore_runtime.cli import fastrun

USAGE_KEYS = {"tier", "isolation", "wall_s", "peak_memory", "fuel", "bytes_out"}


def _wbx(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")}, "WB_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-m", "wbcore_runtime", *args], input=stdin, env=env, cwd=tmp_path,
                          capture_output=True, timeout=120, check=False)


def test_run_json_gives_the_result_and_its_usage(tmp_path: Path) -> None:
    done = _wbx(tmp_path, "run", "--json", "upper", stdin=b"hello")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["name"], doc["exit_code"], doc["stdout"], doc["stderr"]) == ("upper", 0, "HELLO", "")
    usage = doc["usage"]
    assert set(usage) == USAGE_KEYS
    assert usage["tier"] == "instance" and usage["isolation"] is None  # only a microvm names kvm/tcg
    assert 0 < usage["wall_s"] < 60 and usage["peak_memory"] > 0 and usage["bytes_out"] == 5
    assert done.stdout.count(b"\n") == 1  # one line: a script reads it with one json.loads


def test_run_json_passes_the_exit_code_and_binary_output(tmp_path: Path) -> None:
    miss = _wbx(tmp_path, "run", "--json", "-v", "grep", "zzz", stdin=b"hello\n")
    assert miss.returncode == 1
    assert json.loads(miss.stdout)["exit_code"] == 1
    assert b"grep: tier instance" in miss.stderr  # -v still adds its stderr line
    raw = _wbx(tmp_path, "run", "--json", "upper", stdin=b"\xff\xfe")
    doc = json.loads(raw.stdout)
    assert "stdout" not in doc and doc["stdout_b64"] == "//4="


def test_run_json_errors_are_a_document_too(tmp_path: Path) -> None:
    done = _wbx(tmp_path, "run", "--json", "no-such-command")
    assert done.returncode == 127
    doc = json.loads(done.stdout)
    assert doc["exit_code"] == 127 and doc["error"]["kind"] == "not-found"
    assert "no-such-command" in doc["error"]["message"]


def test_json_is_a_wbx_option_before_the_name_only() -> None:
    assert fastrun.parse(["run", "--json", "upper", "x"]) == fastrun.RunArgs("upper", ("x",), json=True)
    assert fastrun.parse(["run", "upper", "--json"]) == fastrun.RunArgs("upper", ("--json",))
    assert fastrun.guest_args(("--json",))[1] is not None  # the note: put wbx's options before the name
