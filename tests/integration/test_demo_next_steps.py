"""The demo's closing lines name its home and commands that work as printed in a new
shell (no WB_HOME, another working folder): the project's wbx.toml finds the same home."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from wbcore_demo import demo
from wbcore_runtime.build import builder
from wbcore_runtime.runtime import Runtime

TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"


def test_next_steps_work_as_printed_in_a_new_shell(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    shutil.copytree(TOOLKITS / "b64", proj / "toolkits" / "b64")
    (proj / "wbx.toml").write_text('home = ".wb-home"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    rt = Runtime.open(env=env, cwd=proj)
    assert rt.home == proj.resolve() / ".wb-home"
    res = builder.build(rt, "b64")
    text = demo.next_steps(rt, [(res.kind, res.name)])
    lines = text.strip().splitlines()
    assert lines[0] == f"== home: {proj.resolve() / '.wb-home'} (from {proj.resolve() / 'wbx.toml'})"
    assert lines[1] == "next, in a new shell:"
    commands = [ln.strip().split("   #")[0] for ln in lines[2:]]
    assert commands[0] == f"cd {proj}" and not any("WB_HOME" in c for c in commands)
    assert any(c.endswith("run b64") for c in commands)
    script = " && ".join(c for c in commands if "mcp serve" not in c)  # serve would wait for a client
    fresh = {**env, "HOME": str(tmp_path)}
    done = subprocess.run(["sh", "-c", script], cwd="/", env=fresh, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, (script, done.stderr)
    assert "aGVsbG8K" in done.stdout  # echo hello | wbx run b64
    assert "b64 · stable" in done.stdout  # wbx toolkit list found the project's toolkits


def test_the_demo_mcp_session_lists_calls_and_reads_a_skill(tmp_path: Path, capsys) -> None:
    proj = tmp_path / "proj"
    shutil.copytree(TOOLKITS / "b64", proj / "toolkits" / "b64")
    (proj / "wbx.toml").write_text('home = ".wb-home"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    rt = Runtime.open(env=env, cwd=proj)
    builder.build(rt, "b64")
    assert demo.mcp_session(rt) == 0
    out = capsys.readouterr().out
    assert "tools/list → " in out and "b64.b64" in out
    assert "tools/call b64.b64 {stdin: 'hello from MCP'} → aGVsbG8gZnJvbSBNQ1A=" in out
    assert 'resources/read skill://b64/SKILL.md → description: "Encode bytes' in out


def test_the_demo_network_steps_read_its_local_site(tmp_path: Path, capsys) -> None:
    """http and pip-fetch, as shipped, reach the demo's site on 127.0.0.1 only through the deployer
    setting the demo prints; each step shows a real result (exit 0), none the public internet."""
    import pytest

    pytest.importorskip("wbcore_lane_js")
    from wbcore_demo.demosite import DemoSite

    proj = tmp_path / "proj"
    for ident in ("http", "pip-fetch"):
        shutil.copytree(TOOLKITS / ident, proj / "toolkits" / ident)
    (proj / "wbx.toml").write_text('home = ".wb-home"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    rt = Runtime.open(env=env, cwd=proj)
    with DemoSite() as site:
        demo._open_to(rt, site)
        failed, built = demo._build_and_run(rt, rt.discover(), site.url)
    out = capsys.readouterr().out
    assert failed == 0, out
    assert "WB_NET_ALLOW_PRIVATE_HOSTS=127.0.0.1" in out
    assert '"version": "1.0.0"' in out and '"received": {"title": "hello", "tags": ["demo"]}' in out
    assert f"wb_greeting-1.0.0-py3-none-any.whl {site.wheel_sha256}" in out
    assert f"sha256 {site.wheel_sha256} ok" in out
    assert sorted(built) == [("command", "http"), ("command", "pip-fetch")]
