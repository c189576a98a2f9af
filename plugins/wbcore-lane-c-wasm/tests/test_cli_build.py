"""Through ``wbx toolkit build`` (needs the path: prefix and the command shape)."""

from __future__ import annotations

import importlib.util

import pytest

needs = pytest.mark.skipif(
    importlib.util.find_spec("wbcore_sources") is None or importlib.util.find_spec("wbcore_wasmtime") is None,
    reason="wbcore-sources (path:) and wbcore-wasmtime (command shape) are not installed",
)

FIELDS = {"BUILD_LANG": "c-wasm", "BUILD_SRC": "path:src", "CLI_BIN": "leak"}


@needs
def test_host_include_fails_the_build_with_tccs_message_and_nothing_registers(make_toolkit, make_runtime,
                                                                              wbx):
    make_toolkit("leak", exec="command", extra=FIELDS, drawer={"CLI_BIN": "leak"},
                 files={"src/main.c": '#include "/etc/passwd"\nint main(void) { return 0; }\n'})
    rt = make_runtime(plugins=["lane-c-wasm", "sources", "wasmtime"])
    res = wbx("toolkit", "build", "leak", runtime=rt)
    assert res.exit_code == 2
    assert "include file '/etc/passwd' not found" in res.stderr and "root:" not in res.stderr + res.stdout
    assert rt.registry.lookup("command", "leak") is None


@needs
def test_builds_registers_runs_and_rebuild_is_a_cache_hit(make_toolkit, make_runtime, wbx):
    make_toolkit("leak", exec="command", extra=FIELDS, drawer={"CLI_BIN": "leak"},
                 files={"src/main.c": '#include <stdio.h>\nint main(int c, char **v) { printf("%d\\n", c); '
                        'return 0; }\n'})
    rt = make_runtime(plugins=["lane-c-wasm", "sources", "wasmtime"])
    first = wbx("toolkit", "build", "leak", runtime=rt)
    assert first.exit_code == 0, first.stderr
    again = wbx("toolkit", "build", "leak", runtime=rt)
    assert again.exit_code == 0 and "cached" in again.stdout
    ran = wbx("run", "leak", "a", "b", runtime=rt, input=b"")
    assert ran.stdout == "3\n", (ran.exit_code, ran.stderr)


@needs
def test_an_output_the_compiler_left_as_a_link_is_refused_never_stored(make_toolkit, make_runtime, wbx,
                                                                       monkeypatch, tmp_path):
    """tcc writes /out from inside wasm, and a WASI guest may make a symlink there whose text
    leaves the folder (wasmtime checks links only when the guest follows them). A compiler the
    C source took over could name a host file as its output: the build must not store it."""
    import os

    from wbcore_lane_c_wasm import lane as c_lane
    from wbcore_runtime.contract.guest import GuestResult

    host_file = tmp_path / "host-secret"
    host_file.write_bytes(b"\0asm\x01\0\0\0 API_KEY=of-the-host")

    def taken_over(_module, argv, **kw):  # what a taken-over tcc can do through WASI path_symlink
        out = next(p.host for p in kw["preopens"] if p.guest == "/out")
        name = argv[argv.index("-o") + 1].removeprefix("/out/")
        os.symlink(os.path.relpath(host_file, out), out / name)
        return GuestResult(0, b"", b"")

    monkeypatch.setattr(c_lane.guest, "run", taken_over)
    make_toolkit("leak", exec="command", extra=FIELDS, drawer={"CLI_BIN": "leak"},
                 files={"src/main.c": "int main(void) { return 0; }\n"})
    rt = make_runtime(plugins=["lane-c-wasm", "sources", "wasmtime"])
    res = wbx("toolkit", "build", "leak", runtime=rt)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert "leak.wasm: symlink to a file outside its folder" in res.stderr
    assert rt.registry.lookup("command", "leak") is None
    stored = [p.read_bytes() for p in (rt.home / "artifacts").rglob("*.wasm")]
    assert host_file.read_bytes() not in stored


class NativeC:
    """A stand-in native ``c`` lane (test fixture) that must not be used for third-party C."""

    from wbcore_runtime import hookimpl as _hookimpl

    @_hookimpl
    def wbcore_build_lanes(self):
        from wbcore_runtime.contract.records import BuildLane

        def refuse(_rt):
            raise AssertionError("third-party C reached the native c lane")

        yield BuildLane(name="c", summary="test c lane", where="nowhere (test)", factory=refuse)


@needs
def test_third_party_c_is_built_by_c_wasm(make_toolkit, make_runtime, wbx, monkeypatch):
    import base64

    monkeypatch.setenv("WB_SIGNING_KEY", base64.b64encode(bytes(range(32))).decode())
    fields = {**FIELDS, "BUILD_LANG": "c"}
    make_toolkit("leak", exec="command", trust="third-party", extra=fields, drawer={"CLI_BIN": "leak"},
                 files={"src/main.c": '#include <stdio.h>\nint main(void) { puts("tcc"); return 0; }\n'})
    rt = make_runtime(plugins=["lane-c-wasm", "sources", "wasmtime", NativeC()])
    # A third-party toolkit is built only while its signature verifies (unsigned: refused, not built).
    refused = wbx("toolkit", "build", "leak", runtime=rt)
    assert refused.exit_code == 126 and "not built" in refused.stderr
    assert wbx("toolkit", "sign", "leak", runtime=rt).exit_code == 0
    rt.discover(refresh=True)
    res = wbx("toolkit", "build", "leak", runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert "c-wasm" in res.stdout + res.stderr
