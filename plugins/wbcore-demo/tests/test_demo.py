"""``wbx demo`` with only the core and wbcore-demo: the plugin adds the command through
``wbcore_cli_commands``, and what the demo needs from other plugins (lanes, shapes, tiers, the
built-in ``upper``, the federation and MCP plugins) it asks the runtime for, explaining each
one missing instead of failing."""

from __future__ import annotations

from pathlib import Path

from wbcore_demo import demo
from wbcore_runtime.runtime import Runtime
from wbcore_testing.fixtures import write_toolkit


def test_the_demo_with_only_the_core_explains_what_is_missing_and_exits_0(make_toolkit, make_runtime,
                                                                          wbx) -> None:
    make_toolkit("kit", exec="command",
                 extra={"CLI_BIN": "kit", "BUILD_SRC": "path:kit.wat", "BUILD_LANG": "wat"},
                 files={"kit.wat": "(module)\n"})
    make_toolkit("guide")  # discovery-only: skills for an agent
    rt = make_runtime(plugins=["demo"])
    r = wbx("demo", runtime=rt)
    assert r.exit_code == 0, r.stdout + r.stderr
    out = r.stdout
    assert "== discover: 2 toolkit(s)" in out
    assert "a local web site for the network toolkits: http://127.0.0.1:" in out
    assert "  kit: skipped: lane wat is unavailable here (no plugin serves it)" in out
    assert "  guide: discovery-only — skills only" in out
    assert "built-in upper: skipped: no installed plugin serves it (wbcore-wasmtime does)" in out
    assert "skipped: no installed plugin serves the federation shape (wbcore-federation does)" in out
    assert "skipped: the MCP plugin (wbcore-mcp, with the mcp SDK) is not installed" in out
    assert "-- kit cannot run on this machine: no installed plugin serves its shape command" in out
    assert "== 2 toolkit(s) verified; 0 step(s) failed" in out
    assert "mcp serve   #" not in out  # the closing lines offer only what is installed
    # the demo opened loopback for its own site in this runtime only, and said so
    assert (rt.env["WB_NET_ALLOW_PRIVATE_HOSTS"] == "127.0.0.1"
            and "WB_NET_ALLOW_PRIVATE_HOSTS=127.0.0.1" in out)


def test_a_home_from_wb_home_is_exported_in_the_next_steps(tmp_path: Path) -> None:
    rt = Runtime.open(plugins=[], env={"WB_HOME": str(tmp_path / "mine")}, cwd=tmp_path)
    text = demo.next_steps(rt, [("command", "b64")])
    assert "(from $WB_HOME)" in text and f"export WB_HOME={tmp_path / 'mine'}" in text
    assert "run b64" in text and "mcp serve" not in text


def test_demo_args_hold_several_invocations(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "t", extra={"DEMO_ARGS": "put 'a note' && get x && list"})
    m = Runtime.open(plugins=[], home=tmp_path / "home", roots=[tmp_path]).toolkit("t").manifest
    assert demo._steps(m) == [["put", "a note"], ["get", "x"], ["list"]]
    site = write_toolkit(tmp_path, "s", extra={"DEMO_ARGS": "{site}/api/releases"})
    assert site.is_dir()
    s = Runtime.open(plugins=[], home=tmp_path / "home", roots=[tmp_path]).toolkit("s").manifest
    assert demo._steps(s, "http://127.0.0.1:9") == [["http://127.0.0.1:9/api/releases"]]
