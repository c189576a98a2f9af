"""Agent definitions (seed 004) and the injected toolkit index."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_agent import definitions as agents
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit import discovery
from wbcore_testing.fixtures import write_toolkit
from wbcore_testing.samples import AGENT



def test_parse_reads_first_agent_node_and_system_prompt_heading() -> None:
    a = agents.parse(AGENT)
    assert ((a.id, a.model, a.toolkits, a.tagline)
            == ("researcher", "gpt-test", ("beta", "ghost", "alpha"), "Finds things."))
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


def test_tool_choice_per_step_the_last_holding() -> None:
    """``:TOOL_CHOICE:`` gives steps 1, 2, … their choice; the last entry holds after them."""
    a = agents.parse("* A :agent:\n  :PROPERTIES:\n  :ID: a\n  :TOOL_CHOICE: b64__b64, done\n  :END:\n")
    assert a.tool_choice == ("b64__b64", "done") and a.as_dict()["tool_choice"] == ["b64__b64", "done"]
    assert [agents.tool_choice_at(a, n) for n in range(3)] == ["b64__b64", "done", "done"]
    plain = agents.parse("* A :agent:\n  :PROPERTIES:\n  :ID: a\n  :END:\n")
    assert plain.tool_choice == () and agents.tool_choice_at(plain, 0) is None


def test_injection_text_declared_order_unknown_dropped(tmp_path: Path):
    root = tmp_path / "r"
    skills = {f"s{i}": f"#+TITLE: s{i}\nline\n" for i in range(10)}
    skills["overview"] = "#+TITLE: o\nx\n"
    write_toolkit(root, "zeta", skills=skills)
    write_toolkit(root, "alpha")
    found = discovery.discover([root])
    text = agents.toolkit_index(found, ["zeta", "nope", "alpha"])
    lines = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert [ln.split()[1] for ln in lines] == ["zeta:", "alpha:"]
    assert lines[0].endswith("(skills: overview, s0, s1, s2, s3, s4, s5, s6, +3 more)")  # at most 8 names
