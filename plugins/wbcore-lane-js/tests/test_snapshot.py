"""Pre-initialized js guests (wbcore_lane_js.snapshot): made at build time, reproducible,
resumed per call with nothing of one call carried into the next."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from wbcore_runtime.store.artifacts import IntegrityError
from wbcore_runtime.build import BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_testing.guests import guest_runner
from wbcore_lane_js import artifact, qjs, snapshot
from wbcore_lane_js.lane import JsLane
from wbcore_lane_js.runner import run_artifact

MAIN = """
import { twice } from './lib/twice.js';
globalThis.calls = (globalThis.calls ?? 0) + 1;
const input = std.in.readAsString();
console.log(JSON.stringify({ calls, args: scriptArgs, input: twice(input), r: Math.random(), now: Date.now() }));
"""  # noqa: E501


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "snaptool"
    (d / "src" / "lib").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("snaptool", exec="command",
                                                  extra={"CLI_BIN": "snaptool", "BUILD_LANG": "js",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "snaptool"}))
    (d / "src" / "main.js").write_text(MAIN)
    (d / "src" / "lib" / "twice.js").write_text("export const twice = (s) => s + s;\n")
    return d


def build(home: Path, tk: Path, out: Path) -> Path:
    s = tk / "src"
    lane = JsLane(home=home, guests=guest_runner())
    req = BuildRequest(manifest=load(tk / "manifest.org"),
                       source=ResolvedSource(digest=tree_digest(s), dir=s), outdir=out)
    return lane.build(req).artifact


def test_the_artifact_is_a_snapshot_and_the_same_bytes_from_a_fresh_home(tk, tmp_path):
    a = build(tmp_path / "home-a", tk, tmp_path / "a").read_bytes()
    b = build(tmp_path / "home-b", tk, tmp_path / "b").read_bytes()
    assert a == b
    names = dict((n, bytes(p)) for n, p in artifact.custom_sections(a))
    assert names[artifact.SNAPSHOT_SECTION] == b"1"
    import wasmtime

    mod = wasmtime.Module(wasmtime.Engine(), artifact.code_part(a))
    exports = {e.name for e in mod.exports}
    assert exports == set(snapshot.KEEP_EXPORTS)  # no _initialize, no qjs_init_argv: it starts initialized


def test_each_call_runs_the_program_afresh_with_its_own_argv_stdin_clock_and_random(tk, tmp_path, wb_home):
    art = build(wb_home, tk, tmp_path / "out")
    sha = hashlib.sha256(art.read_bytes()).hexdigest()
    one = json.loads(run_artifact(art, ["snaptool", "x"], stdin=b"ab", home=wb_home, sha256=sha,
                                  guests=guest_runner()).stdout)
    two = json.loads(run_artifact(art, ["snaptool", "y", "z"], stdin=b"c", home=wb_home, sha256=sha,
                                  guests=guest_runner()).stdout)
    assert (one["calls"], one["args"], one["input"]) == (1, ["snaptool", "x"], "abab")
    # nothing carried over
    assert (two["calls"], two["args"], two["input"]) == (1, ["snaptool", "y", "z"], "cc")
    assert one["r"] != two["r"]  # Math.random reseeded per call, not the snapshot's sequence
    assert one["now"] > (snapshot.FIXED_CLOCK_NS // 10**6) + 86_400_000  # the real clock, not the build's


def test_calls_with_other_limits_still_get_them(tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text("const a = []; for (;;) a.push('x'.repeat(1 << 20));\n")
    art = build(wb_home, tk, tmp_path / "out")
    for mem in (32 << 20, qjs.SNAPSHOT_MEMORY, 128 << 20):
        res = run_artifact(art, ["snaptool"], home=wb_home, memory_bytes=mem, timeout_s=10,
                           guests=guest_runner())
        assert res.exit_code != 0 and not res.timed_out, (mem, res)
    (tk / "src" / "main.js").write_text("const f = (n) => f(n + 1) + 1; f(0);\n")
    art = build(wb_home, tk, tmp_path / "out2")
    for stack in (64 << 10, qjs.DEFAULT_STACK):  # QuickJS's own limit or wasmtime's guard: a clean stop
        res = run_artifact(art, ["snaptool"], home=wb_home, stack_bytes=stack, timeout_s=10,
                           guests=guest_runner())
        assert res.exit_code in (1, 134) and not res.timed_out, (stack, res)


def test_a_flipped_byte_in_the_snapshot_is_refused(tk, tmp_path, wb_home):
    art = build(wb_home, tk, tmp_path / "out")
    data = bytearray(art.read_bytes())
    sha = hashlib.sha256(data).hexdigest()
    data[len(data) // 3] ^= 0x01  # inside the frozen code or data
    art.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        run_artifact(art, ["snaptool"], home=wb_home, sha256=sha, guests=guest_runner())


def test_a_reactor_without_function_names_cannot_be_snapshotted():
    bare = artifact.MAGIC + b"\x01\x04\x01\x60\x00\x00"  # one type, no name section
    with pytest.raises(InvalidArgs, match="name section"):
        snapshot.instrument(bare)


REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


@pytest.mark.parametrize(("tk", "argv", "code", "usage"), [
    ("http", ["--help"], 0, "usage: http [-X METHOD]"),
    ("http", [], 65, "http: no URL\nusage: http"),
    ("pip-fetch", ["--help"], 0, "usage: pip-fetch [--index URL]"),
    ("pip-fetch", [], 65, "pip-fetch: give NAME VERSION [FILE]\nusage: pip-fetch"),
    ("pip-fetch", ["requests", "2.32.3"], 65, "pip-fetch: give --index URL: your pip index"),
])
def test_shipped_dock_toolkits_answer_as_before_with_and_without_the_bridge(tk, argv, code, usage, tmp_path,
                                                                            wb_home):
    d = REPO_TOOLKITS / tk
    if not d.is_dir():
        pytest.skip(f"toolkits/{tk} is not beside this plugin")
    art = build(wb_home, d, tmp_path / "out")
    for dock in (None, lambda cap, req: (5, b"")):  # the bridge set up (caps granted) or not
        res = run_artifact(art, [tk, *argv], home=wb_home, dock=dock, guests=guest_runner())
        assert (res.exit_code, res.stdout) == (code, b""), res
        assert res.stderr.decode().startswith(usage)


def test_global_initializers_are_parsed_not_scanned_for_an_end_byte():
    # i32.const 11 is 0x41 0x0b 0x0b: its LEB128 byte equals `end`
    body = (snapshot._uleb(2) + b"\x7f\x01\x41" + snapshot._sleb(11) + b"\x0b"
            + b"\x7e\x00\x42" + snapshot._sleb(-5) + b"\x0b")
    assert snapshot._globals(body) == [(0x7F, 1, b"\x41\x0b\x0b"), (0x7E, 0, b"\x42\x7b\x0b")]
    with pytest.raises(InvalidArgs, match="initializer"):
        snapshot._globals(snapshot._uleb(1) + b"\x7f\x01\xd2\x00\x0b")  # ref.func: not a constant this reads
