"""Acceptance: hostile sources fail inside the sandbox or never reach the lane; the host is untouched.

Runs the whole `wbx toolkit build` path (source prefix → lane → sandbox → store).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

pytest.importorskip("wbcore_sources")

C_MAIN = "int main(void){return 0;}\n"


@pytest.fixture
def rt(make_runtime, zig_cache: Path):
    return make_runtime(env={"WB_ZIG_CACHE": str(zig_cache), "WB_BUILD_TIMEOUT": "20",
                             "WB_SOURCES_ALLOW_PRIVATE": "1", "PATH": os.environ.get("PATH", "")})


def c_toolkit(make_toolkit, ident: str, files: dict[str, str], **extra: str) -> Path:
    kw = {"BUILD_LANG": "c", "BUILD_SRC": "path:src", "CLI_BIN": ident, **extra}
    return make_toolkit(ident, exec="command", extra=kw, drawer={"CLI_BIN": ident}, files=files)


def test_include_etc_passwd_fails_with_the_compilers_message(rt, wbx, make_toolkit) -> None:
    c_toolkit(make_toolkit, "leak", {"src/main.c": '#include "/etc/passwd"\n' + C_MAIN})
    res = wbx("toolkit", "build", "leak", runtime=rt)
    assert res.exit_code != 0
    assert "/etc/passwd" in res.stderr and "file not found" in res.stderr
    assert "root:x:" not in res.stderr + res.stdout


def test_include_through_a_symlink_to_the_host_fails(rt, wbx, make_toolkit, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.h"
    secret.write_text('#error "HOST SECRET LEAKED"\n')
    tk = c_toolkit(make_toolkit, "linky", {"src/main.c": '#include "secret.h"\n' + C_MAIN})
    (tk / "src" / "secret.h").symlink_to(secret)
    res = wbx("toolkit", "build", "linky", runtime=rt)
    assert res.exit_code != 0 and "HOST SECRET LEAKED" not in res.stderr


def test_exponential_preprocessor_input_ends_at_its_limit(rt, wbx, make_toolkit) -> None:
    bomb = "\n".join(["#define A0 x"]
                     + [f"#define A{i} A{i-1} A{i-1}" for i in range(1, 40)]) + "\nint main(void){ A39; }\n"
    c_toolkit(make_toolkit, "bomb", {"src/main.c": bomb})
    res = wbx("toolkit", "build", "bomb", runtime=rt)
    assert res.exit_code in (2, 124)  # a failed compile or the deadline, never a hung host


def test_wrong_sha256_never_reaches_the_lane(rt, wbx, make_toolkit, file_server) -> None:
    body = b"\0asm\x01\0\0\0"
    file_server.files["/tool.wasm"] = body
    make_toolkit("pinned", exec="command",
                 extra={"BUILD_SRC": f"wasm:{file_server.url}/tool.wasm", "SHA256": "ab" * 32,
                                                  "CLI_BIN": "pinned"}, drawer={"CLI_BIN": "pinned"})
    res = wbx("toolkit", "build", "pinned", runtime=rt)
    # capability-denied, as docs/signing.md says
    assert res.exit_code == 126 and "sha256 mismatch" in res.stderr
    assert file_server.hits == ["/tool.wasm"]
    assert rt.registry.lookup("command", "pinned") is None
    assert hashlib.sha256(body).hexdigest() not in res.stdout


def test_script_and_unpinned_git_are_refused(rt, wbx, make_toolkit) -> None:
    make_toolkit("scripted", exec="command",
                 extra={"BUILD_SRC": "script:build.sh", "BUILD_LANG": "c", "CLI_BIN": "scripted"},
                 drawer={"CLI_BIN": "scripted"})
    make_toolkit("floating", exec="command",
                 extra={"BUILD_SRC": "git+https://example.org/repo", "BUILD_LANG": "c",
                                                    "CLI_BIN": "floating"}, drawer={"CLI_BIN": "floating"})
    res = wbx("toolkit", "build", "scripted", runtime=rt)
    assert res.exit_code == 2 and "refused" in res.stderr
    res = wbx("toolkit", "build", "floating", runtime=rt)
    assert res.exit_code == 2 and "not pinned" in res.stderr


def test_unchanged_toolkit_rebuild_is_a_cache_hit_with_the_same_sha256(rt, wbx, make_toolkit) -> None:
    c_toolkit(make_toolkit, "hello",
              {"src/main.c": '#include <stdio.h>\nint main(void){puts("hi");return 0;}\n'})
    first = wbx("toolkit", "build", "hello", runtime=rt)
    second = wbx("toolkit", "build", "hello", runtime=rt)
    assert first.exit_code == 0 and second.exit_code == 0, first.stderr
    assert "cached" in second.stdout
    assert first.stdout.split("→ ")[1].split()[0] == second.stdout.split("→ ")[1].split()[0]
    assert rt.call("hello").stdout == b"hi\n"


# --- untried escapes (issue 11): @embedFile, object files -------------------------------


def zig_toolkit(make_toolkit, ident: str, main: str) -> Path:
    kw = {"BUILD_LANG": "zig", "BUILD_SRC": "path:src", "CLI_BIN": ident}
    return make_toolkit(ident, exec="command", extra=kw, drawer={"CLI_BIN": ident},
                        files={"src/main.zig": main})


EMBED = ('const std = @import("std");\nconst leak = @embedFile("{path}");\n'
         'pub fn main() void {{ std.debug.print("{{s}}", .{{leak}}); }}\n')


def test_zig_embedfile_of_an_absolute_host_path_fails(rt, wbx, make_toolkit) -> None:
    zig_toolkit(make_toolkit, "embedabs", EMBED.format(path="/etc/passwd"))
    res = wbx("toolkit", "build", "embedabs", runtime=rt)
    assert res.exit_code != 0 and "root:x:" not in res.stderr + res.stdout
    assert "embedFile" in res.stderr or "/etc/passwd" in res.stderr
    assert rt.registry.lookup("command", "embedabs") is None


def test_zig_embedfile_climbing_out_of_the_source_fails(rt, wbx, make_toolkit, toolkit_root: Path) -> None:
    (toolkit_root / "x").write_text("HOST-SECRET-ZIG\n")  # ../../x from src/main.zig
    zig_toolkit(make_toolkit, "embedup", EMBED.format(path="../../x"))
    res = wbx("toolkit", "build", "embedup", runtime=rt)
    assert res.exit_code != 0 and "HOST-SECRET-ZIG" not in res.stderr + res.stdout
    assert rt.registry.lookup("command", "embedup") is None


def test_object_files_in_the_source_are_refused_unless_declared(make_runtime, zig_cache: Path, wbx,
                                                                make_toolkit) -> None:
    c_toolkit(make_toolkit, "objs", {"src/main.c": C_MAIN, "src/lib/helper.o": "\x7fELF"})
    c_toolkit(make_toolkit, "objs2", {"src/main.c": C_MAIN, "src/lib/helper.o": "\x7fELF"},
              BUILD_OBJECTS="lib/helper.o")
    rt = make_runtime(env={"WB_ZIG_CACHE": str(zig_cache), "WB_BUILD_TIMEOUT": "60",
                           "PATH": os.environ.get("PATH", "")})
    res = wbx("toolkit", "build", "objs", runtime=rt)
    assert res.exit_code == 2 and "'lib/helper.o'" in res.stderr and "#+BUILD_OBJECTS" in res.stderr
    res = wbx("toolkit", "build", "objs2", runtime=rt)
    assert res.exit_code == 0, res.stderr  # declared: the lane builds (its *.c; the .o is not linked)


@pytest.mark.parametrize("flag",
                         ["-Wl,-z,stack-size=1", "-Wl,--export=secret", "-Wa,-o,/out/x",
                          "-Wp,-include,/etc/passwd"])
def test_linker_assembler_and_preprocessor_passthrough_flags_are_refused(flag):
    """-W is for warnings: -Wl, / -Wa, / -Wp, would hand anything past the allowlist."""
    from wbcore_runtime.contract.errors import InvalidArgs

    from wbcore_lane_zig.lanes import check_c_flags

    with pytest.raises(InvalidArgs, match="is not allowed"):
        check_c_flags((flag,))
    check_c_flags(("-Wall", "-Wno-unused-parameter", "-Werror=format"))  # warnings stay allowed
