"""The shipped C and Zig toolkits: built from source by `wbx toolkit build`, then run."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import pytest

TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


@pytest.fixture
def rt(make_runtime, zig_cache: Path):
    return make_runtime(roots=[TOOLKITS],
                        env={"WB_ZIG_CACHE": str(zig_cache), "PATH": os.environ.get("PATH", "")})


def test_sha256_toolkit_builds_and_runs(rt, wbx) -> None:
    res = wbx("toolkit", "build", "sha256", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert rt.call("sha256", [], b"abc").stdout == hashlib.sha256(b"abc").hexdigest().encode() + b"\n"
    mac = hmac.new(b"Jefe", b"what do ya want for nothing?", hashlib.sha256).hexdigest()
    assert rt.call("sha256", ["hmac", "Jefe"], b"what do ya want for nothing?").stdout.decode().strip() == mac
    ok = rt.call("sha256", ["check", hashlib.sha256(b"x").hexdigest().upper()], b"x")
    bad = rt.call("sha256", ["check", "0" * 64], b"x")
    assert (ok.exit_code, bad.exit_code) == (0, 1)
    assert rt.call("sha256", ["lines"], b"a\nb").stdout.splitlines()[1].endswith(b"  b")
    again = wbx("toolkit", "build", "sha256", runtime=rt)
    assert "cached" in again.stdout  # unchanged source: a build-cache hit


def test_lines_toolkit_builds_and_runs(rt, wbx) -> None:
    res = wbx("toolkit", "build", "lines", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert (rt.call("lines", ["stats"], b"one two\n\nthree\n").stdout.decode().split("\n")[:3]
            == ["lines 3", "words 3", "bytes 15"])
    assert rt.call("lines", ["freq", "2"], b"b\na\nb\nc\nb\na\n").stdout == b"3\tb\n2\ta\n"
    assert rt.call("lines", ["dedupe"], b"b\na\nb\nc\na").stdout == b"b\na\nc\n"
    assert rt.call("lines", ["grep-count", "x"], b"x\ny\nxx\n").stdout == b"2\n"
    assert rt.call("lines", ["nope"], b"").exit_code == 2
