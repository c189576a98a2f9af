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
