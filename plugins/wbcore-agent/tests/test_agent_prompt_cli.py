"""The injected toolkit index of an agent definition, and ``wbx agent prompt``."""

from __future__ import annotations

from pathlib import Path

from wbcore_agent import definitions as agents
from wbcore_runtime.runtime import Runtime
from wbcore_testing.samples import AGENT


def test_index_declared_order_unknown_dropped_eight_skills(make_toolkit, make_runtime, tmp_path: Path,
                                                           wbx) -> None:
    make_toolkit("alpha", skills={f"s{i:02d}": f"#+TITLE: s{i}\n\nskill {i}\n" for i in range(10)}
                 | {"overview": "o\n"})
    make_toolkit("beta", tagline="Use beta for b things.")
    rt = make_runtime()
    a = agents.parse(AGENT)
    index = agents.toolkit_index(rt.discover(), a.toolkits)
    lines = [ln for ln in index.splitlines() if ln.startswith("- ")]
    assert [ln.split(":")[0] for ln in lines] == ["- beta", "- alpha"]
    assert "ghost" not in index
    assert "Use beta for b things." in lines[0]
    skills = lines[1].split("(skills: ")[1].rstrip(")").split(", ")
    assert skills[:8] == ["overview", "s00", "s01", "s02", "s03", "s04", "s05", "s06"]
    assert skills[8] == "+3 more"
    path = tmp_path / "agent.org"
    path.write_text(AGENT)
    res = wbx("agent", "prompt", str(path), runtime=rt)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("You are careful.")
    assert "- beta: Use beta for b things." in res.stdout
    assert "`wbx toolkit show <toolkit> <skill>`" in res.stdout  # a reader outside wbcore has a shell


def test_agent_prompt_warns_about_each_toolkit_left_out(tmp_path: Path, wbx) -> None:
    empty = tmp_path / "nowhere"
    empty.mkdir()
    agent = tmp_path / "agent.org"
    agent.write_text("* Helper :agent:\n  :PROPERTIES:\n  :ID: h\n  :TOOLKITS: alpha beta\n  :END:\n"
                     "** System prompt\nBe brief.\n")
    rt = Runtime.open(plugins=["agent"], env={"WB_HOME": str(tmp_path / "h")}, cwd=empty)
    res = wbx("agent", "prompt", str(agent), runtime=rt)
    assert res.exit_code == 0
    assert res.stdout.strip() == "Be brief."
    assert "agent toolkit 'alpha' left out of the index" in res.stderr
    assert "agent toolkit 'beta' left out of the index" in res.stderr
    assert "searched:" in res.stderr and "WB_TOOLKIT_PATH" in res.stderr
