"""The c-wasm lane: tcc in wasmtime builds C; the source cannot reach the host."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wbcore_runtime.contract import guest
from wbcore_testing.guests import guest_runner
from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit.manifest import load as parse
from wbcore_testing.fixtures import manifest_text

from wbcore_lane_c_wasm.lane import CWasmLane

HELLO = r"""
#include <stdio.h>
#include <string.h>
#include "util.h"
int main(int argc, char **argv) {
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, stdin)) n++;
    printf("%s:%d:%d\n", argc > 1 ? argv[1] : "-", n, twice(21));
    return argc > 2 ? 3 : 0;
}
"""


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "hello"
    (d / "src").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("hello", exec="command",
                                                  extra={"CLI_BIN": "hello", "BUILD_LANG": "c-wasm",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "hello"}))
    (d / "src" / "main.c").write_text(HELLO)
    (d / "src" / "util.h").write_text("int twice(int);\n")
    (d / "src" / "util.c").write_text('#include "util.h"\nint twice(int x) { return 2 * x; }\n')
    return d


@pytest.fixture
def lane(make_runtime) -> CWasmLane:
    rt = make_runtime(plugins=["lane-c-wasm", "wasmtime"])
    lane = rt.lanes.get("c-wasm")
    assert lane.available().ok, lane.available().reason
    return lane.factory(rt)


def build(lane: CWasmLane, tk: Path, out: Path, src: str = "src", flags: tuple[str, ...] = ()):
    m = parse(tk / "manifest.org")
    s = tk / src
    return lane.build(BuildRequest(manifest=m, source=ResolvedSource(digest=tree_digest(s), dir=s),
                                   outdir=out, flags=flags))


def run(wasm: Path, argv: list[str], stdin: bytes, tmp_path: Path) -> guest.GuestResult:
    inp = tmp_path / "stdin"
    inp.write_bytes(stdin)
    mod = guest_runner().module(wasm.read_bytes())
    return guest.run(mod, argv, stdin=inp, limits=guest.GuestLimits(timeout_s=10))


def test_builds_multi_file_program_that_runs(lane, tk, tmp_path):
    out = build(lane, tk, tmp_path / "out")
    mod = guest_runner().module(out.artifact.read_bytes())
    # our bridge replaces shellsim's: the program imports WASI Preview 1 and nothing else
    assert {i.module for i in mod.handle.imports} == {"wasi_snapshot_preview1"}
    res = run(out.artifact, ["hello", "x"], b"a\nb\nc\n", tmp_path)
    assert (res.exit_code, res.stdout) == (0, b"x:3:42\n")
    assert run(out.artifact, ["hello", "x", "y"], b"", tmp_path).exit_code == 3
    assert "tcc" in out.log and lane.version.startswith("tcc-wasm")


def test_two_clean_builds_give_the_same_sha256(lane, tk, tmp_path):
    a = build(lane, tk, tmp_path / "a").artifact.read_bytes()
    b = build(lane, tk, tmp_path / "b").artifact.read_bytes()
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()


def test_compile_error_carries_compilers_message(lane, tk, tmp_path):
    (tk / "src" / "util.c").write_text("int twice(int x) { return x +; }\n")
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "util.c:1" in err.value.log and "tcc failed" in str(err.value)


@pytest.mark.parametrize("include",
                         ['"/etc/passwd"', '"../../../../../../etc/passwd"', '"leak.h"',
                          '"/proc/self/environ"'])
def test_source_cannot_read_host_files(lane, tk, tmp_path, include):
    os.symlink("/etc/passwd", tk / "src" / "leak.h")
    (tk / "src" / "util.c").write_text(f"#include {include}\nint twice(int x) {{ return 2 * x; }}\n")
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "root:" not in err.value.log
    assert "include file" in err.value.log or "No such file" in err.value.log or "not" in err.value.log


def test_source_is_read_only_and_nothing_lands_outside_out(lane, tk, tmp_path):
    # tcc -o is the lane's; a flag that would redirect output is refused
    with pytest.raises(InvalidArgs):
        build(lane, tk, tmp_path / "out", flags=("-o", "/src/evil.wasm"))
    with pytest.raises(InvalidArgs):
        build(lane, tk, tmp_path / "out", flags=("-run",))
    before = sorted(p.name for p in (tk / "src").iterdir())
    build(lane, tk, tmp_path / "out", flags=("-DNDEBUG", "-O2", "-Wall"))
    assert sorted(p.name for p in (tk / "src").iterdir()) == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hello.wasm"]


def test_preprocessor_bomb_ends_at_its_deadline(make_runtime, tk, tmp_path):
    rt = make_runtime(plugins=["lane-c-wasm", "wasmtime"], env={"WB_BUILD_TIMEOUT": "2"})
    lane = rt.lanes.get("c-wasm").factory(rt)
    # each level doubles the expansion: 2**40 tokens never finish
    lines = ["#define L0 x"] + [f"#define L{i} L{i-1} L{i-1}" for i in range(1, 41)] + ["int a[] = { L40 };"]
    (tk / "src" / "util.c").write_text("\n".join(lines) + "\n")
    from wbcore_runtime.contract.errors import Timeout

    with pytest.raises((Timeout, BuildFailed)):
        build(lane, tk, tmp_path / "out")


def test_without_a_guest_runner_the_lane_names_what_to_install(make_runtime):
    from wbcore_runtime.contract.errors import NotFound

    rt = make_runtime(plugins=["lane-c-wasm"])
    with pytest.raises(NotFound, match="pip install wbcore-wasmtime"):
        rt.lanes.get("c-wasm").factory(rt)


def test_single_entry_file_and_missing_sources(lane, tk, tmp_path):
    (tk / "one").mkdir()
    (tk / "one" / "solo.c").write_text('#include <stdio.h>\nint main(void){puts("solo");return 0;}\n')
    m = parse(tk / "manifest.org")
    out = lane.build(BuildRequest(manifest=m,
                                  source=ResolvedSource(digest="x", dir=tk / "one", entry="solo.c"),
                                  outdir=tmp_path / "o"))
    assert run(out.artifact, ["solo"], b"", tmp_path).stdout == b"solo\n"
    (tk / "empty").mkdir()
    with pytest.raises(InvalidArgs):
        lane.build(BuildRequest(manifest=m, source=ResolvedSource(digest="x", dir=tk / "empty"),
                                outdir=tmp_path / "o2"))


# --- the shipped hexdump toolkit (toolkits/hexdump), built by this lane -----------------

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


def test_hexdump_toolkit_builds_and_runs(lane, tmp_path):
    import json

    tk = REPO_TOOLKITS / "hexdump"
    if not tk.is_dir():
        pytest.skip("toolkits/hexdump is not beside this plugin")
    out = build(lane, tk, tmp_path / "out")
    res = run(out.artifact, ["hexdump", "dump"], b"hello, world\n", tmp_path)
    assert (res.stdout
            == b"00000000  68 65 6c 6c 6f 2c 20 77  6f 72 6c 64 0a           |hello, world.|\n0000000d\n")
    res = run(out.artifact, ["hexdump", "dump", "-s", "0x4", "-n", "3"], b"0123456789", tmp_path)
    assert res.stdout.splitlines()[0].startswith(b"00000004  34 35 36")
    assert run(out.artifact, ["hexdump", "strings", "-m", "5"], b"\x00\x01hello\x02ab\x03world!\x00",
               tmp_path).stdout == b"00000002 hello\n0000000b world!\n"
    stats = json.loads(run(out.artifact, ["hexdump", "stats"], b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
                           tmp_path).stdout)
    assert stats["kind"] == "PNG image" and stats["bytes"] == 264 and stats["distinct"] == 256
    assert run(out.artifact, ["hexdump", "nope"], b"", tmp_path).exit_code == 2


@pytest.mark.parametrize("flag", ["-Wl,-z,stack-size=1", "-Wa,-o,/out/x", "-Wp,-include,/etc/passwd"])
def test_passthrough_flags_to_linker_assembler_preprocessor_are_refused(flag):
    from wbcore_runtime.contract.errors import InvalidArgs

    from wbcore_lane_c_wasm.lane import check_flags

    with pytest.raises(InvalidArgs, match="is not allowed"):
        check_flags((flag,))
    check_flags(("-Wall", "-Wno-unused"))
