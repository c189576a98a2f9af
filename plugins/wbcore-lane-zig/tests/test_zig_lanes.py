"""The c and zig lanes: real compiles inside the build sandbox, run in wasmtime."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource, tree_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.toolkit.manifest import parse
from wbcore_testing.fixtures import manifest_text

from wbcore_lane_zig.lanes import CLane, ZigLane


def request(src: Path, out: Path, *, flags: tuple[str, ...] = (), entry: str | None = None,
            trust: str | None = None) -> BuildRequest:
    m = parse(manifest_text("demo", trust=trust,
                            extra={"CLI_BIN": "demo",
                                   **({"AUTHOR_DID": "did:key:z6Mk",
                                       "SIGNATURE": "x"} if trust == "third-party" else {})},
                            drawer={"CLI_BIN": "demo"}), src / "manifest.org")
    return BuildRequest(manifest=m, source=ResolvedSource(digest=tree_digest(src), dir=src, entry=entry),
                        outdir=out, flags=flags)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def run_wasm(path: Path, stdin: bytes = b"", argv: tuple[str, ...] = ()) -> tuple[int, bytes]:
    import tempfile

    import wasmtime

    eng = wasmtime.Engine()
    store = wasmtime.Store(eng)
    linker = wasmtime.Linker(eng)
    linker.define_wasi()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = wasmtime.WasiConfig()
        (Path(tmp) / "in").write_bytes(stdin)
        cfg.stdin_file = str(Path(tmp) / "in")
        cfg.stdout_file = str(Path(tmp) / "out")
        cfg.argv = ["demo", *argv]
        store.set_wasi(cfg)
        inst = linker.instantiate(store, wasmtime.Module.from_file(eng, str(path)))
        code = 0
        try:
            inst.exports(store)["_start"](store)
        except wasmtime.ExitTrap as exc:
            code = exc.code
        return code, (Path(tmp) / "out").read_bytes()


C_COUNT = """
    #include <stdio.h>
    #include "count.h"
    int main(int argc, char **argv) {
        long n = 0; int c;
        while ((c = getchar()) != EOF) n += COUNT_ONE(c);
        printf("%ld %d\\n", n, argc);
        return 0;
    }
"""


@pytest.fixture
def lanes(zig_cache: Path, build_sandbox, tmp_path: Path) -> tuple[CLane, ZigLane]:
    env = {"WB_ZIG_CACHE": str(zig_cache), "WB_BUILD_TIMEOUT": "120"}
    return (CLane(home=tmp_path / "home", env=env, sandbox=lambda: build_sandbox),
            ZigLane(home=tmp_path / "home", env=env, sandbox=lambda: build_sandbox))


@pytest.mark.parametrize("toolchain", ["clang", "zig"])
def test_c_lane_builds_a_small_wasi_command(lanes, tmp_path: Path, toolchain: str) -> None:
    from wbcore_lane_zig.toolchain import find_clang

    if toolchain == "clang" and isinstance(find_clang(), str):
        pytest.skip(f"Debian's WASI clang is not installed: {find_clang()}")
    lane = lanes[0]
    lane.env["WB_C_TOOLCHAIN"] = toolchain
    src = write(tmp_path / "src",
                {"main.c": C_COUNT, "include/count.h": "#define COUNT_ONE(c) ((c) == 'a')\n"})
    out = lane.build(request(src, tmp_path / "out"))
    assert out.artifact.name == "demo.wasm" and out.artifact.stat().st_size < 64_000  # -Oz -s
    assert run_wasm(out.artifact, b"banana", ("x",)) == (0, b"3 2\n")
    want = ("zig cc --target=wasm32-wasi -Oz -s" if toolchain == "zig"
            else "clang --target=wasm32-wasip1 --sysroot=/sysroot -Oz -s")
    assert want in out.log
    assert toolchain in lane.version  # the toolchain is part of the build cache key


def test_c_lane_is_reproducible(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"main.c": C_COUNT, "include/count.h": "#define COUNT_ONE(c) 1\n"})
    a = lanes[0].build(request(src, tmp_path / "a")).artifact.read_bytes()
    b = lanes[0].build(request(src, tmp_path / "b")).artifact.read_bytes()
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()


def test_zig_lane_builds_and_runs(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src",
                {"src/main.zig":
                 (Path(__file__).parents[1] / "wbcore_lane_zig/warmup/hello.zig").read_text()})
    out = lanes[1].build(request(src, tmp_path / "out"))
    code, stdout = run_wasm(out.artifact, b"hello", ("a", "b"))
    assert (code, stdout) == (0, b"3 args, 5 bytes\n")


def test_include_of_host_file_fails_inside_the_sandbox(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"main.c": '#include "/etc/passwd"\nint main(void){return 0;}\n'})
    with pytest.raises(BuildFailed) as info:
        lanes[0].build(request(src, tmp_path / "out"))
    assert "/etc/passwd" in info.value.log and "root:" not in info.value.log


def test_relative_include_cannot_climb_out(lanes, tmp_path: Path) -> None:
    secret = tmp_path / "secret.h"
    secret.write_text("#error LEAKED\n")
    src = write(tmp_path / "src", {"main.c": '#include "../secret.h"\nint main(void){return 0;}\n'})
    with pytest.raises(BuildFailed) as info:
        lanes[0].build(request(src, tmp_path / "out"))
    assert "LEAKED" not in info.value.log and "not found" in info.value.log


def test_zig_embed_file_cannot_read_the_host(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src",
                {"main.zig": 'const s = @embedFile("/etc/hostname");\npub fn main() void { _ = s; }\n'})
    with pytest.raises(BuildFailed):
        lanes[1].build(request(src, tmp_path / "out"))


def test_exponential_macro_ends_at_its_limit(zig_cache: Path, build_sandbox, tmp_path: Path) -> None:
    lines = (["#define A0 x"] + [f"#define A{i} A{i-1} A{i-1}" for i in range(1, 40)]
             + ["int main(void){ A39; return 0; }"])
    src = write(tmp_path / "src", {"main.c": "\n".join(lines) + "\n"})
    lane = CLane(home=tmp_path / "home", env={"WB_ZIG_CACHE": str(zig_cache), "WB_BUILD_TIMEOUT": "4"},
                 sandbox=lambda: build_sandbox)
    with pytest.raises((Timeout, BuildFailed)):
        lane.build(request(src, tmp_path / "out"))


def test_flags_outside_the_allowlist_are_refused(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"main.c": "int main(void){return 0;}\n"})
    for flag in ("-o/etc/x", "-I/etc", "--target=x86_64-linux", "-fplugin=/x.so", "-B/tmp"):
        with pytest.raises(InvalidArgs, match="not allowed"):
            lanes[0].build(request(src, tmp_path / "out", flags=(flag,)))


def test_compiler_message_is_kept(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"main.c": "int main(void){ return undefined_thing; }\n"})
    with pytest.raises(BuildFailed, match="undefined_thing") as info:
        lanes[0].build(request(src, tmp_path / "out"))
    assert "main.c" in info.value.log


def test_lanes_are_listed_with_an_honest_label(make_runtime) -> None:
    rt = make_runtime()
    for name in ("c", "zig"):
        lane = rt.lanes.get(name)
        assert "sandbox" in lane.where and "zig" in lane.where
        assert lane.needs_build_sandbox
        assert lane.availability(rt).ok in (True, False)


def test_without_a_build_sandbox_the_lanes_say_what_to_install(make_runtime, wbx, tmp_path: Path) -> None:
    rt = make_runtime(plugins=["lane-zig"])  # the lanes alone with the core: no plugin serves a sandbox
    for name in ("c", "zig"):
        avail = rt.lanes.get(name).availability(rt)
        assert not avail.ok and "no build sandbox is installed; pip install wbcore-process" in avail.reason
    r = wbx("lanes", runtime=rt)
    assert (r.exit_code == 0
            and r.stdout.count("no build sandbox is installed; pip install wbcore-process") == 2)
    src = write(tmp_path / "src", {"main.c": "int main(void){return 0;}\n"})
    with pytest.raises(NotFound, match="^no build sandbox is installed; pip install wbcore-process$"):
        rt.lanes.get("c").factory(rt).build(request(src, tmp_path / "out"))


@pytest.mark.slow
def test_two_clean_builds_give_the_same_sha256(build_sandbox, tmp_path: Path) -> None:
    """Fresh caches on both sides (each warms wasi-libc from nothing: minutes)."""
    from wbcore_lane_zig import cache
    from wbcore_lane_zig.toolchain import find

    zig = find()
    assert not isinstance(zig, str)
    digests = []
    for side in ("one", "two"):
        cache_dir = tmp_path / side / "cache"
        cache.warm(zig, cache_dir, build_sandbox)
        env = {"WB_ZIG_CACHE": str(cache_dir)}
        c_src = write(tmp_path / side / "c",
                      {"main.c": C_COUNT, "include/count.h": "#define COUNT_ONE(c) 1\n"})
        z_src = write(tmp_path / side / "z",
                      {"main.zig":
                       (Path(__file__).parents[1] / "wbcore_lane_zig/warmup/hello.zig").read_text()})
        c = CLane(home=tmp_path / side, env=env,
                  sandbox=lambda: build_sandbox).build(request(c_src, tmp_path / side / "c-out")).artifact
        z = ZigLane(home=tmp_path / side, env=env,
                    sandbox=lambda: build_sandbox).build(request(z_src, tmp_path / side / "z-out")).artifact
        digests.append((hashlib.sha256(c.read_bytes()).hexdigest(),
                        hashlib.sha256(z.read_bytes()).hexdigest()))
    assert digests[0] == digests[1]


def test_build_zig_projects_are_refused_with_a_hint(lanes, tmp_path: Path) -> None:
    src = write(tmp_path / "src",
                {"build.zig": "pub fn build(b: anytype) void { _ = b; }\n",
                 "tool.zig": "pub fn main() void {}\n"})
    with pytest.raises(InvalidArgs, match="build.zig projects are not run"):
        lanes[1].build(request(src, tmp_path / "out"))
    out = lanes[1].build(request(src, tmp_path / "out", entry="tool.zig"))
    assert out.artifact.read_bytes()[:4] == b"\0asm"
