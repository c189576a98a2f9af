"""The js lane: modules checked and run inside QuickJS-NG's reactor wasm."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_testing.guests import guest_runner
from wbcore_lane_js import artifact
from wbcore_lane_js.runner import run_artifact

MAIN = """
import { shout } from './lib/text.js';
const input = std.in.readAsString();
await new Promise((r) => setTimeout(r, 5));
console.log(JSON.stringify({ args: scriptArgs, lines: input.split('\\n').filter(Boolean).length, s: shout('hi') }));
setTimeout(() => console.log('late timer ran'), 5);
Promise.resolve().then(() => console.log('microtask ran'));
if (scriptArgs.includes('--fail')) process.exitCode = 4;
"""  # noqa: E501


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "jstool"
    (d / "src" / "lib").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("jstool", exec="command",
                                                  extra={"CLI_BIN": "jstool", "BUILD_LANG": "js",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "jstool"}))
    (d / "src" / "main.js").write_text(MAIN)
    (d / "src" / "lib" / "text.js").write_text("export const shout = (s) => s.toUpperCase() + '!';\n")
    return d


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["lane-js", "wasmtime"])


@pytest.fixture
def lane(rt):
    rec = rt.lanes.get("js")
    assert rec.available().ok, rec.available().reason
    assert rec.kind == "compile-and-run"
    return rec.factory(rt)


def build(lane, tk: Path, out: Path):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s), outdir=out))


def test_builds_and_runs_module_with_await_timers_and_exit_code(lane, tk, tmp_path, wb_home):
    out = build(lane, tk, tmp_path / "out")
    assert artifact.runner_of(out.artifact) == "js"
    res = run_artifact(out.artifact, ["jstool", "a", "-b"], stdin=b"x\ny\n", home=wb_home,
                       guests=guest_runner())
    lines = res.stdout.decode().splitlines()
    assert res.exit_code == 0, res.stderr
    assert lines[0] == '{"args":["jstool","a","-b"],"lines":2,"s":"HI!"}'
    assert set(lines[1:]) == {"microtask ran", "late timer ran"}
    assert run_artifact(out.artifact, ["jstool", "--fail"], home=wb_home,
                        guests=guest_runner()).exit_code == 4


def test_artifact_is_runtime_plus_source_content_addressed(lane, tk, tmp_path):
    a = build(lane, tk, tmp_path / "a").artifact.read_bytes()
    b = build(lane, tk, tmp_path / "b").artifact.read_bytes()
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    (tk / "src" / "lib" / "text.js").write_text("export const shout = (s) => s + '?';\n")
    c = build(lane, tk, tmp_path / "c").artifact.read_bytes()
    assert hashlib.sha256(c).digest() != hashlib.sha256(a).digest()
    import wasmtime

    wasmtime.Module.validate(wasmtime.Engine(), a)  # still a valid wasm module
    assert "lib/text.js" in artifact.unpack(a).files


def test_syntax_error_and_missing_import_fail_the_build(lane, tk, tmp_path):
    (tk / "src" / "lib" / "text.js").write_text("export const shout = (s) => {\n  return s +;\n};\n")
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "text.js:2" in err.value.log and "SyntaxError" in err.value.log
    (tk / "src" / "lib" / "text.js").unlink()
    with pytest.raises(BuildFailed):
        build(lane, tk, tmp_path / "out2")


def test_uncaught_error_is_exit_1_with_stack(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text("function f() { throw new TypeError('boom'); }\nf();\n")
    out = build(lane, tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner())
    assert res.exit_code == 1 and b"TypeError: boom" in res.stderr


def test_limits_infinite_loop_memory_bomb_and_deep_recursion(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text(
        "const m = scriptArgs[1];\n"
        "if (m === 'loop') for (;;) {}\n"
        "if (m === 'mem') { const a = []; for (;;) a.push('x'.repeat(1 << 20) + a.length); }\n"
        "if (m === 'deep') { const f = (n) => f(n + 1) + 1; try { f(0); } catch (e) { console.log(e.name); } "
        "}\n"
    )
    out = build(lane, tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["t", "loop"], home=wb_home, timeout_s=0.5, guests=guest_runner())
    assert res.timed_out and res.exit_code == 124
    res = run_artifact(out.artifact, ["t", "mem"], home=wb_home, memory_bytes=48 << 20, timeout_s=10,
                       guests=guest_runner())
    assert res.exit_code != 0 and not res.timed_out
    # wasmtime's own call-stack guard ends runaway recursion as a clean trap
    res = run_artifact(out.artifact, ["t", "deep"], home=wb_home, timeout_s=10, guests=guest_runner())
    assert res.exit_code == 134 and "call stack exhausted" in res.trap


def test_guest_sees_only_its_own_sources(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text(
        "const r = [];\n"
        "for (const p of ['/etc/passwd', '/app/main.js', '../../../etc/passwd']) { const f = std.open(p, "
        "'r'); r.push(f ? 'open' : 'no'); }\nr.push(std.open('/app/new.txt', 'w') ? 'wrote' : 'ro');\n"
        "console.log(r.join(' '));\n"
    )
    out = build(lane, tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["t"], home=wb_home, guests=guest_runner())
    assert res.stdout == b"no open no ro\n", res.stderr


def test_reserved_names_and_flags_refused(lane, tk, tmp_path):
    (tk / "src" / "__wb_entry.mjs").write_text("")
    with pytest.raises(InvalidArgs):
        build(lane, tk, tmp_path / "out")


# --- the shipped csv toolkit (toolkits/csv), built by this lane -------------------------

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"
CSV = 'name,qty,price\nApple,3,1.5\n"Pear, green",,2\n"Say ""hi""",10,0.25\n'


@pytest.fixture(scope="module")
def csv_artifact(tmp_path_factory) -> Path:
    from wbcore_lane_js.lane import JsLane

    tk = REPO_TOOLKITS / "csv"
    if not tk.is_dir():
        pytest.skip("toolkits/csv is not beside this plugin")
    home = tmp_path_factory.mktemp("home")
    s = tk / "src"
    out = JsLane(home=home, guests=guest_runner()).build(
        BuildRequest(manifest=load(tk / "manifest.org"), source=ResolvedSource(digest=tree_digest(s), dir=s),
                     outdir=home / "out"))
    return out.artifact


def csv(artifact: Path, home: Path, *args: str, stdin: str = CSV):
    res = run_artifact(artifact, ["csv", *args], stdin=stdin.encode(), home=home, guests=guest_runner())
    return res.exit_code, res.stdout.decode(), res.stderr.decode()


def test_csv_toolkit_to_json_and_back(csv_artifact, wb_home):
    import json

    code, out, _ = csv(csv_artifact, wb_home, "to-json", "--types")
    assert code == 0
    rows = json.loads(out)
    assert rows == [{"name": "Apple", "qty": 3, "price": 1.5},
                    {"name": "Pear, green", "qty": None, "price": 2},
                    {"name": 'Say "hi"', "qty": 10, "price": 0.25}]
    code, back, _ = csv(csv_artifact, wb_home, "from-json", stdin=out)
    assert code == 0 and back.splitlines()[1:] == ["Apple,3,1.5", '"Pear, green",,2', '"Say ""hi""",10,0.25']


def test_csv_toolkit_columns_select_stats_and_errors(csv_artifact, wb_home):
    import json

    assert (csv(csv_artifact, wb_home, "columns")[1]
            == "3 rows\n1\tname\ttext\n2\tqty\tinteger\n3\tprice\tnumber\n")
    assert (csv(csv_artifact, wb_home, "select", "price,1")[1]
            == 'price,name\r\n1.5,Apple\r\n2,"Pear, green"\r\n0.25,"Say ""hi"""\r\n')
    stats = json.loads(csv(csv_artifact, wb_home, "stats", "qty")[1])
    assert (stats["min"], stats["max"], stats["missing"], stats["median"]) == (3, 10, 1, 6.5)
    code, _, err = csv(csv_artifact, wb_home, "select", "nope")
    assert code == 2 and "columns: name, qty, price" in err
    code, _, err = csv(csv_artifact, wb_home, "to-json", stdin='a\n"open')
    assert code == 1 and "unterminated" in err


def test_cancel_stops_a_running_guest(lane, tk, tmp_path, wb_home):
    import threading
    import time

    (tk / "src" / "main.js").write_text("for (;;) {}\n")
    out = build(lane, tk, tmp_path / "out")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.perf_counter()
    res = run_artifact(out.artifact, ["t"], home=wb_home, timeout_s=30, cancel=cancel, guests=guest_runner())
    assert res.cancelled and not res.timed_out and time.perf_counter() - t0 < 5
    res = run_artifact(out.artifact, ["t"], home=wb_home, timeout_s=0.3, cancel=threading.Event(),
                       guests=guest_runner())
    assert res.timed_out and not res.cancelled


def test_tampered_extracted_sources_are_replaced_not_run(lane, tk, tmp_path, wb_home):
    out = build(lane, tk, tmp_path / "out")
    assert run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner()).exit_code == 0
    app = next((wb_home / "cache" / "js" / "app").iterdir())
    (app / "lib" / "text.js").write_text("export const shout = () => 'PWNED';\n")
    (app / "extra.js").write_text("x")
    res = run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner())
    assert b"PWNED" not in res.stdout and b'"s":"HI!"' in res.stdout
    assert not (app / "extra.js").exists()


def test_dock_bridge_carries_requests_and_answers_without_touching_stdout(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text(
        "console.log('before');\n"
        "const req = new Uint8Array([0, 1, 2, 255, 10, 0]);\n"
        "const [st, body] = globalThis.__wb_dock('kv', req);\n"
        "const [st2, body2] = globalThis.__wb_dock('net', new Uint8Array(70000).fill(7));\n"
        "console.log('after', st, Array.from(body).join(','), st2, body2.length);\n"
    )
    out = build(lane, tk, tmp_path / "out")
    seen = []

    def handler(cap: str, request: bytes) -> tuple[int, bytes]:
        seen.append((cap, request))
        return (0, b"\xa1\x62ok\xf5") if cap == "kv" else (4, bytes(300000))

    res = run_artifact(out.artifact, ["t"], home=wb_home, dock=handler, guests=guest_runner())
    assert res.stdout == b"before\nafter 0 161,98,111,107,245 4 300000\n", res.stderr
    assert seen == [("kv", bytes([0, 1, 2, 255, 10, 0])), ("net", bytes([7]) * 70000)]
    # without granted caps there is no bridge at all
    res = run_artifact(out.artifact, ["t"], home=wb_home, guests=guest_runner())
    assert res.exit_code == 1 and b"not a function" in res.stderr


def test_program_output_that_looks_like_a_frame_is_just_output(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text("std.out.puts('\\0WBDOCK:guess\\nkv\\0' + '3\\nabc');\n")
    out = build(lane, tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["t"], home=wb_home, dock=lambda cap, req: (0, b""),
                       guests=guest_runner())
    assert res.stdout == b"\0WBDOCK:guess\nkv\x003\nabc"


def test_text_encoder_and_decoder_round_trip_utf8(lane, tk, tmp_path, wb_home):
    (tk / "src" / "main.js").write_text(
        "const s = 'aé€😀\\u0000z';\n"
        "const b = new TextEncoder().encode(s);\n"
        "console.log(Array.from(b).join(','), new TextDecoder().decode(b) === s, new "
        "TextDecoder().decode(new Uint8Array([0xff, 0x41])));\n"
    )
    out = build(lane, tk, tmp_path / "out")
    res = run_artifact(out.artifact, ["t"], home=wb_home, guests=guest_runner())
    assert res.stdout.decode() == "97,195,169,226,130,172,240,159,152,128,0,122 true \ufffdA\n", res.stderr


def test_a_timed_out_guest_ends_with_the_timeout_line_alone(tmp_path) -> None:
    """A looping js command stopped at its deadline prints the timeout line and nothing
    after it: no runtime panic from a store left alive to interpreter exit."""
    import os
    import subprocess
    import sys
    import textwrap

    pytest.importorskip("wbcore_sources", reason="building from path: needs wbcore-sources")
    pytest.importorskip("wbcore_wasmtime", reason="the js runner's host engine comes with wbcore-wasmtime")
    root = tmp_path / "toolkits"
    from wbcore_testing.fixtures import write_toolkit

    write_toolkit(root, "spinjs", manifest_text("spinjs", exec="command", extra={
        "BUILD_LANG": "js", "BUILD_SRC": "path:src", "CLI_BIN": "spinjs"}),
                  files={"src/main.js": "while (true) {}\n"})
    script = textwrap.dedent(f"""
        from wbcore_runtime.build import builder
        from wbcore_runtime.runtime import Runtime
        rt = Runtime.open(roots=[{str(root)!r}], home={str(tmp_path / 'home')!r})
        builder.build(rt, "spinjs")
        try:
            rt.call("spinjs", timeout=0.5)
        except Exception as exc:
            print(type(exc).__name__, flush=True)
    """)
    env = {k: v for k, v in os.environ.items() if k != "WB_HOME"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert res.stdout.strip() == "Timeout", (res.stdout, res.stderr)
    assert "panicked" not in res.stderr and "backtrace" not in res.stderr, res.stderr


def test_sources_are_checked_byte_for_byte_once_per_tree_then_by_stamp(lane, tk, tmp_path, wb_home,
                                                                       monkeypatch):
    from wbcore_lane_js import runner

    out = build(lane, tk, tmp_path / "out")
    assert run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner()).exit_code == 0
    seen = []
    real = runner._matches
    monkeypatch.setattr(runner, "_matches", lambda dest, files: seen.append(dest) or real(dest, files))
    for _ in range(3):
        assert b'"s":"HI!"' in run_artifact(out.artifact, ["jstool"], home=wb_home,
                                            guests=guest_runner()).stdout
    assert seen == []  # the tree's stamp is unchanged: no file is read again
    # a same-size rewrite with the old mtime put back still changes the ctime: checked, replaced
    app = next((wb_home / "cache" / "js" / "app").iterdir())
    text = app / "lib" / "text.js"
    st = text.stat()
    body = text.read_text()
    text.write_text(body.replace("toUpperCase()", "toLowerCase()"))
    os.utime(text, ns=(st.st_atime_ns, st.st_mtime_ns))
    res = run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner())
    assert seen and b'"s":"HI!"' in res.stdout and text.read_text() == body


def test_an_artifact_rewritten_in_place_is_read_again(lane, tk, tmp_path, wb_home):
    out = build(lane, tk, tmp_path / "out")
    assert b'"s":"HI!"' in run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner()).stdout
    (tk / "src" / "lib" / "text.js").write_text("export const shout = (s) => s + '?';\n")
    again = build(lane, tk, tmp_path / "out")
    assert again.artifact == out.artifact  # same path, new bytes
    assert b'"s":"hi?"' in run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner()).stdout
    # a file that is not a js artifact (no runner section) is refused, cached or not
    out.artifact.write_bytes(artifact.code_part(out.artifact.read_bytes()))
    with pytest.raises(InvalidArgs, match="not a js artifact"):
        run_artifact(out.artifact, ["jstool"], home=wb_home, guests=guest_runner())


def test_a_tampered_artifact_is_refused_against_its_digest(lane, tk, tmp_path, wb_home):
    from wbcore_runtime.store.artifacts import IntegrityError

    out = build(lane, tk, tmp_path / "out")
    sha = hashlib.sha256(out.artifact.read_bytes()).hexdigest()
    assert run_artifact(out.artifact, ["jstool"], home=wb_home, sha256=sha,
                        guests=guest_runner()).exit_code == 0
    data = out.artifact.read_bytes()
    bundle = artifact.unpack(data)
    files = dict(bundle.files, **{"lib/text.js": "export const shout = () => 'PWNED';\n"})
    out.artifact.write_bytes(artifact.pack(artifact.code_part(data), artifact.Bundle(bundle.entry, files)))
    with pytest.raises(IntegrityError, match="does not match its sha256"):
        run_artifact(out.artifact, ["jstool"], home=wb_home, sha256=sha, guests=guest_runner())


def test_load_ahead_readies_the_sources_and_holds_the_artifact_to_its_digest(lane, tk, tmp_path, wb_home):
    import types

    from wbcore_runtime.store.artifacts import IntegrityError

    from wbcore_lane_js.runner import JsRunner

    out = build(lane, tk, tmp_path / "out")
    data = out.artifact.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    runner = JsRunner(types.SimpleNamespace(home=wb_home), guests=guest_runner())
    with pytest.raises(IntegrityError, match="does not match its sha256"):
        runner.load_ahead(out.artifact, "0" * 64)
    runner.load_ahead(out.artifact, sha)  # what a fabric node does while it loads a job
    app = wb_home / "cache" / "js" / "app" / sha
    assert (app / "lib" / "text.js").read_text() == artifact.unpack(data).files["lib/text.js"]
