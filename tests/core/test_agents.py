"""Agent definitions (seed 004) and the injected toolkit index."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.toolkit import agents
from wbcore_runtime.contract.errors import InvalidArgs

AGENT = """\
#+TITLE: Research helper

* Notes
Not the agent.

* Researcher :agent:
  :PROPERTIES:
  :ID: researcher
  :MODEL: gpt-test
  :TOOLKITS: beta ghost alpha
  :TAGLINE: Finds things.
  :END:
Body text that is not the prompt.
** System prompt
You are careful.
*** Rules
Cite sources.
** Other
Ignored.
"""


def test_parse_reads_first_agent_node_and_system_prompt_heading() -> None:
    a = agents.parse(AGENT)
    assert (a.id, a.model, a.toolkits, a.tagline) == ("researcher", "gpt-test", ("beta", "ghost", "alpha"), "Finds things.")
    assert a.system_prompt.startswith("You are careful.")
    assert "Cite sources." in a.system_prompt
    assert "Body text" not in a.system_prompt and "Ignored." not in a.system_prompt


def test_prompt_falls_back_to_node_body() -> None:
    a = agents.parse("* Plain :agent:\n  :PROPERTIES:\n  :ID: p\n  :END:\nJust do it.\n")
    assert a.system_prompt == "Just do it."
    assert a.toolkits == ()


def test_no_agent_node_is_invalid_args() -> None:
    with pytest.raises(InvalidArgs, match=":agent:"):
        agents.parse("* Nothing here\n")


def test_index_declared_order_unknown_dropped_eight_skills(make_toolkit, make_runtime, tmp_path: Path, wbx) -> None:
    make_toolkit("alpha", skills={f"s{i:02d}": f"#+TITLE: s{i}\n\nskill {i}\n" for i in range(10)} | {"overview": "o\n"})
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


def test_tool_choice_per_step_the_last_holding() -> None:
    """``:TOOL_CHOICE:`` gives steps 1, 2, … their choice; the last entry holds after them."""
    a = agents.parse("* A :agent:\n  :PROPERTIES:\n  :ID: a\n  :TOOL_CHOICE: b64__b64, done\n  :END:\n")
    assert a.tool_choice == ("b64__b64", "done") and a.as_dict()["tool_choice"] == ["b64__b64", "done"]
    assert [agents.tool_choice_at(a, n) for n in range(3)] == ["b64__b64", "done", "done"]
    plain = agents.parse("* A :agent:\n  :PROPERTIES:\n  :ID: a\n  :END:\n")
    assert plain.tool_choice == () and agents.tool_choice_at(plain, 0) is None
