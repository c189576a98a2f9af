"""The c lane builds ordinary C: setjmp/longjmp (wasm exceptions), Lua, reproducible bytes,
and says which toolchain it uses."""

from __future__ import annotations

import os
import tarfile
import textwrap
from pathlib import Path

import pytest
from wbcore_lane_zig import toolchain

from wbcore_testing.fixtures import manifest_text

DATA = Path(__file__).parent / "data"

SJLJ_C = r"""
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
static int depth;

static void dive(int n) {
    depth = n;
    if (n == 0) longjmp(env, 42);
    dive(n - 1);
}

int main(int argc, char **argv) {
    volatile int round = 0;
    int got = setjmp(env);
    if (got == 0) {
        dive(argc > 1 ? 100 : 3);
        puts("not reached");
        return 1;
    }
    printf("jumped %d from depth %d, round %d\n", got, depth, round);
    if (++round < 3) longjmp(env, 0);  /* longjmp(env, 0) makes setjmp return 1 */
    return 0;
}
"""


def toolkit(root: Path, ident: str, files: dict[str, str], extra: dict[str, str] | None = None) -> Path:
    tk = root / ident
    (tk / "src").mkdir(parents=True, exist_ok=True)
    m = manifest_text(ident, exec="command",
                      extra={"BUILD_LANG": "c", "BUILD_SRC": "path:src", "CLI_BIN": ident,
                                                    **(extra or {})}, drawer={"CLI_BIN": ident})
    (tk / "manifest.org").write_text(m)
    for rel, text in files.items():
        p = tk / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tk


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    root = tmp_path / "c-toolkits"
    root.mkdir()
    return root


@pytest.fixture
def rt(make_runtime, zig_cache: Path, roots: Path):
    return make_runtime(roots=[roots],
                        env={"WB_ZIG_CACHE": str(zig_cache), "PATH": os.environ.get("PATH", "")})


def test_setjmp_longjmp_program_builds_and_runs(rt, wbx, roots: Path) -> None:
    toolkit(roots, "jumper", {"src/main.c": SJLJ_C})
    res = wbx("toolkit", "build", "jumper", runtime=rt)
    assert res.exit_code == 0, res.stderr
    out = rt.call("jumper", [], b"")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.decode().splitlines() == [
        "jumped 42 from depth 0, round 0", "jumped 1 from depth 0, round 1", "jumped 1 from depth 0, round 2"]


def test_c_sjlj_keyword_is_checked(rt, wbx, roots: Path) -> None:
    toolkit(roots, "badsjlj", {"src/main.c": "int main(void) { return 0; }\n"}, {"C_SJLJ": "maybe"})
    res = wbx("toolkit", "build", "badsjlj", runtime=rt)
    assert res.exit_code != 0
    assert "C_SJLJ" in res.stderr + res.stdout


@pytest.mark.parametrize("flag", ["-fwasm-exceptions", "-fexceptions", "-fuse-ld=lld", "-fplugin=x",
                                  "-fsanitize=address", "-mexception-handling", "-mllvm", "--target=x86_64"])
def test_target_changing_flags_stay_refused(rt, wbx, roots: Path, flag: str) -> None:
    toolkit(roots, "flags", {"src/main.c": "int main(void) { return 0; }\n"}, {"BUILD_FLAGS": flag})
    res = wbx("toolkit", "build", "flags", runtime=rt)
    assert res.exit_code != 0
    assert "is not allowed" in res.stderr + res.stdout


def test_builds_are_reproducible(rt, wbx, roots: Path, tmp_path: Path, make_runtime, zig_cache: Path) -> None:
    """The same source in another folder and another home gives the same bytes."""
    toolkit(roots, "jumper", {"src/main.c": SJLJ_C})
    first = wbx("toolkit", "build", "jumper", runtime=rt)
    assert first.exit_code == 0, first.stderr
    other = tmp_path / "elsewhere"
    other.mkdir()
    toolkit(other, "jumper", {"src/main.c": SJLJ_C})
    rt2 = make_runtime(roots=[other], home=tmp_path / "home2",
                       env={"WB_ZIG_CACHE": str(zig_cache), "PATH": os.environ.get("PATH", "")})
    second = wbx("toolkit", "build", "jumper", runtime=rt2)
    assert second.exit_code == 0, second.stderr
    sha = [r.registry.lookup("command", "jumper").sha256 for r in (rt, rt2)]
    assert sha[0] == sha[1]


def test_lanes_say_which_c_toolchain_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    clang = toolchain.find_clang()
    av = toolchain.c_available()
    assert av.ok
    if isinstance(clang, toolchain.Clang):
        assert "clang" in av.reason and "wasi-libc" in av.reason
    else:
        assert "zig" in av.reason and clang in av.reason  # the reason clang is not used
    monkeypatch.setenv("WB_C_TOOLCHAIN", "zig")
    assert "WB_C_TOOLCHAIN=zig" in toolchain.c_available().reason
    monkeypatch.setenv("WB_C_TOOLCHAIN", "gcc")
    assert not toolchain.c_available().ok


# --- Lua 5.4.8, its release sources unmodified (tests/data/lua/README.md) -------------------

LUA_TESTES = ("strings", "math", "sort", "closure", "nextvar", "coroutine", "errors")


@pytest.fixture
def lua(rt, wbx, roots: Path):
    tk = toolkit(roots, "lua", {}, {
        "BUILD_SRC": "path:src/wb_lua.c",
        "BUILD_FLAGS": "-D_WASI_EMULATED_SIGNAL -D_WASI_EMULATED_PROCESS_CLOCKS -lwasi-emulated-signal "
                       "-lwasi-emulated-process-clocks",
    })
    with tarfile.open(DATA / "lua" / "lua-5.4.8-wb.tar.gz") as tar:
        tar.extractall(tk / "src", filter="data")
    (tk / "src" / "wb_lua.c").write_bytes((DATA / "lua" / "wb_lua.c").read_bytes())
    res = wbx("toolkit", "build", "lua", runtime=rt)
    assert res.exit_code == 0, res.stderr
    return tk


@pytest.mark.slow
def test_lua_interpreter_answers(rt, lua: Path) -> None:
    out = rt.call("lua", ["-"], b"print(string.format('%5.2f', math.pi))\n")
    assert (out.exit_code, out.stdout) == (0, b" 3.14\n"), out.stderr
    # error/pcall unwind through longjmp
    out = rt.call("lua", ["-"], b"print(pcall(function() local t = nil; return t.x end))\n")
    assert out.stdout.startswith(b"false\t") and b"attempt to index a nil value" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", LUA_TESTES)
def test_lua_testes_pass(rt, lua: Path, name: str) -> None:
    """Lua's own test scripts that need no os/io host features, read from stdin under their
    own chunk name (errors.lua checks the file name in messages)."""
    script = (lua / "src" / "lua-5.4.8" / "testes" / f"{name}.lua").read_bytes()
    out = rt.call("lua",
                  ["-e", "_port=true _soft=true", "-e", f"assert(load(io.read('a'), '@{name}.lua'))()"],
                  script, timeout=120)
    assert out.exit_code == 0, (out.stdout[-2000:], out.stderr[-2000:])
    assert out.stdout.rstrip().endswith(b"OK")


# --- #+PREOPEN: a read-only folder of the toolkit, for commands ---------------------------

READER_C = r"""
#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/data/words.txt";
    FILE *f = fopen(path, "r");
    if (!f) { printf("open %s: %s\n", path, strerror(errno)); return 3; }
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    printf("%s", buf);
    FILE *w = fopen("/data/new.txt", "w");
    printf(w ? "write allowed\n" : "write refused\n");
    return 0;
}
"""


def reader(roots: Path, preopen: str | None, ident: str = "reader") -> Path:
    tk = toolkit(roots, ident, {"src/main.c": READER_C, "data/words.txt": "alpha beta\n"},
                 {"PREOPEN": preopen} if preopen else {})
    return tk


def test_preopen_gives_a_command_its_data_read_only(rt, wbx, roots: Path) -> None:
    tk = reader(roots, "data /data")
    res = wbx("toolkit", "build", "reader", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert rt.registry.lookup("command", "reader").options["preopen"][0]["guest"] == "/data"
    out = rt.call("reader", [], b"")
    assert out.stdout == b"alpha beta\nwrite refused\n", out.stderr
    assert not (tk / "data" / "new.txt").exists()
    # nothing outside the preopened folder is reachable, by .. or by another absolute path
    assert rt.call("reader", ["/data/../manifest.org"], b"").exit_code == 3
    assert rt.call("reader", ["/etc/passwd"], b"").exit_code == 3


def test_without_preopen_a_command_sees_no_files(rt, wbx, roots: Path) -> None:
    reader(roots, None)
    assert wbx("toolkit", "build", "reader", runtime=rt).exit_code == 0
    out = rt.call("reader", [], b"")
    assert out.exit_code == 3 and out.stdout.startswith(b"open /data/words.txt:")


@pytest.mark.parametrize("value", ["../outside /data", "/etc /data", "link /data", "data /dev", "data rel",
                                   "data /a/../b", "missing /data", "data /data extra"])
def test_preopen_outside_the_toolkit_is_refused(rt, wbx, roots: Path, tmp_path: Path, value: str) -> None:
    tk = reader(roots, value)
    (tmp_path / "outside").mkdir(exist_ok=True)
    (tk / "link").symlink_to(tmp_path / "outside")
    res = wbx("toolkit", "build", "reader", runtime=rt)
    assert res.exit_code != 0
    assert "PREOPEN" in res.stderr + res.stdout or "outside" in res.stderr + res.stdout


def test_preopen_folder_swapped_for_a_link_after_the_build_is_refused(rt, wbx, roots: Path,
                                                                      tmp_path: Path) -> None:
    import shutil

    from wbcore_runtime.guard import preopen

    tk = reader(roots, "data /data")
    assert wbx("toolkit", "build", "reader", runtime=rt).exit_code == 0
    options = rt.registry.lookup("command", "reader").options
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "words.txt").write_text("host secret\n")
    shutil.rmtree(tk / "data")
    (tk / "data").symlink_to(secret)
    # what every call asks before it preopens: the copy stored at build time, not the folder
    host, guest = preopen.resolve(options, rt.home)
    assert guest == "/data" and (Path(host) / "words.txt").read_text() == "alpha beta\n"
    assert Path(host).is_relative_to(rt.home) and not Path(host).is_relative_to(tk)
    from wbcore_runtime.contract.errors import WbError

    try:
        out = rt.call("reader", [], b"")
    except WbError as exc:  # refused: the toolkit changed since its build, or the link is followed nowhere
        assert "host secret" not in exc.message
    else:
        assert b"host secret" not in out.stdout + out.stderr


def _mmap_write(path: Path, data: bytes) -> None:
    """Change ``path`` in place through a shared mapping: the page is dirtied once by a
    write(2) of the same bytes (which moves mtime/ctime), then the stat is taken, then the
    new bytes go through the mapping (a store to an already-dirty page may update neither)."""
    import mmap

    with open(path, "r+b") as fh:
        old = fh.read()
        fh.seek(0)
        fh.write(old)
        fh.flush()
        with mmap.mmap(fh.fileno(), len(old), mmap.MAP_SHARED) as mm:
            mm[: len(data)] = data
            mm.flush()


def _rewrite_keep_times(path: Path, data: bytes) -> None:
    """A same-size rewrite with mtime (and atime) set back: only ctime can tell."""
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_in_place_keep_times(path: Path, data: bytes) -> None:
    """Overwrite through the same inode (no rename), then utime back."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("change", [_mmap_write, _rewrite_keep_times, _rewrite_in_place_keep_times])
def test_preopened_data_changed_after_the_build_is_never_seen(rt, wbx, roots: Path, change, make_runtime,
                                                             zig_cache: Path) -> None:
    """Data a call reads besides its stdin comes from the home's store: a change to the toolkit
    folder after the build, however it hides from a stat, is never served."""
    from wbcore_runtime.contract.errors import WbError

    tk = reader(roots, "data /data")
    assert wbx("toolkit", "build", "reader", runtime=rt).exit_code == 0
    assert rt.call("reader", [], b"").stdout == b"alpha beta\nwrite refused\n"
    words = tk / "data" / "words.txt"
    before = words.stat()
    change(words, b"EVIL!12345\n")
    assert words.read_bytes() == b"EVIL!12345\n" and words.stat().st_ino == before.st_ino
    for fresh in (rt, None):  # this runtime, then a new one (a new process resolves afresh)
        runtime = fresh or make_runtime(roots=[roots], env={"WB_ZIG_CACHE": str(zig_cache),
                                                            "PATH": os.environ.get("PATH", "")})
        try:
            out = runtime.call("reader", [], b"")
        except WbError as exc:  # refused as changed since its build: also never the new bytes
            assert "EVIL" not in exc.message
        else:
            assert out.stdout == b"alpha beta\nwrite refused\n", out.stdout


def test_shipped_source_changed_after_the_build_is_never_run(rt, wbx, roots: Path) -> None:
    """The artifact a call runs is the one in the store, built from the verified snapshot:
    a source file rewritten in place after the build (stat times put back) changes nothing."""
    from wbcore_runtime.contract.errors import WbError

    tk = toolkit(roots, "hello",
                 {"src/main.c": '#include <stdio.h>\nint main(void){puts("hello A");return 0;}\n'})
    assert wbx("toolkit", "build", "hello", runtime=rt).exit_code == 0
    sha = rt.registry.lookup("command", "hello").sha256
    _mmap_write(tk / "src" / "main.c", b'#include <stdio.h>\nint main(void){puts("hello B");return 0;}\n')
    try:
        out = rt.call("hello", [], b"")
    except WbError as exc:
        assert "hello B" not in exc.message
    else:
        assert out.stdout == b"hello A\n"
    assert rt.registry.lookup("command", "hello").sha256 == sha


@pytest.mark.slow
def test_setjmp_longjmp_with_the_zig_toolchain(make_runtime, zig_cache: Path, wbx, roots: Path) -> None:
    """The zig fallback: zig's own <setjmp.h> and runtime (its wasi-libc rebuilt with
    exceptions in the private cache overlay, minutes) plus the lane's __c_longjmp tag."""
    rt = make_runtime(roots=[roots], env={"WB_ZIG_CACHE": str(zig_cache), "WB_C_TOOLCHAIN": "zig",
                                          "WB_BUILD_TIMEOUT": "900", "PATH": os.environ.get("PATH", "")})
    toolkit(roots, "jumper", {"src/main.c": SJLJ_C})
    res = wbx("toolkit", "build", "jumper", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert "zig cc" in res.stdout + res.stderr or "zig" in rt.lanes.get("c").factory(rt).version
    out = rt.call("jumper", [], b"")
    assert out.stdout.decode().splitlines()[0] == "jumped 42 from depth 0, round 0", out.stderr


def test_sjlj_detection_reads_regular_files_only(tmp_path: Path) -> None:
    """A FIFO or a link named like a source is skipped, never opened (a FIFO would block)."""
    from wbcore_lane_zig.lanes import wants_sjlj

    from wbcore_runtime.build import BuildRequest, ResolvedSource
    from wbcore_runtime.toolkit.manifest import parse

    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text("int main(void) { return 0; }\n")
    os.mkfifo(src / "trap.c")
    outside = tmp_path / "outside.h"
    outside.write_text("#include <setjmp.h>\n")
    (src / "link.h").symlink_to(outside)
    m = parse(manifest_text("demo", extra={"CLI_BIN": "demo"}, drawer={"CLI_BIN": "demo"}),
              src / "manifest.org")
    req = BuildRequest(manifest=m, source=ResolvedSource(digest="x", dir=src, entry=None),
                       outdir=tmp_path / "o")
    assert wants_sjlj(req, src) is False
    (src / "real.h").write_text("  # include <setjmp.h>\n")
    assert wants_sjlj(req, src) is True

