"""Pipelines authored in Org: box kinds (command, kernel, agent) and their errors."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract.errors import ManifestError
from wbcore_fabric_local.pipeline import Box, parse

FLOW = """* flow :pipeline:
** pipe :stage:
   :PROPERTIES:
   :RUN: upper
   :END:
** pipe :stage:
   :PROPERTIES:
   :RUN: agents/summarizer.org "summarize the input" briefly
   :KIND: agent
   :END:
"""


def test_an_agent_box_names_the_agent_then_its_task():
    (flow,) = parse(FLOW)
    assert flow.stages[1].boxes == (
        Box("agents/summarizer.org", ("summarize the input", "briefly"), "agent"),)


def test_an_agent_box_without_a_task_is_refused_with_its_line():
    text = FLOW.replace(':RUN: agents/summarizer.org "summarize the input" briefly', ":RUN: summarizer")
    with pytest.raises(ManifestError, match="names the agent, then its task") as exc:
        parse(text, "flow.org")
    assert "flow.org:8" in str(exc.value)


def test_an_unknown_box_kind_lists_the_known_ones():
    with pytest.raises(ManifestError, match="known: command, kernel, agent"):
        parse(FLOW.replace(":KIND: agent", ":KIND: robot"))


def test_mounts_are_a_command_boxs_split_like_run_and_bounded():
    text = FLOW.replace(":RUN: upper\n", ":RUN: upper\n   :MOUNTS: '/srv/my data:/data' /srv/b:/b:rw\n")
    assert parse(text)[0].stages[0].boxes[0].mounts == ("/srv/my data:/data", "/srv/b:/b:rw")
    with pytest.raises(ManifestError, match=r"flow.org:10: MOUNTS: agent boxes bind no host folder"):
        parse(FLOW.replace(":KIND: agent\n", ":KIND: agent\n   :MOUNTS: /srv/a:/a\n"), "flow.org")
    with pytest.raises(ManifestError, match="at most 4"):
        parse(FLOW.replace(":RUN: upper\n",
                           ":RUN: upper\n   :MOUNTS: " + " ".join(f"/a:/a{i}" for i in range(5)) + "\n"))
