"""Agent definitions (seed 004) and the injected toolkit index."""

from __future__ import annotations


import pytest

from wbcore_runtime.toolkit import agents
from wbcore_runtime.contract.errors import InvalidArgs
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
