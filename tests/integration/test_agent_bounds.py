"""The agent loop's bounds over real HTTP (docs/agents.md "Bounds"): a scripted model server
that floods one reply with 10,000 tool calls, sends a 17 MiB argument, ignores `stream`,
or answers with nothing; each ends as the docs say and the run's state is saved."""

from __future__ import annotations

import json

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_testing.scripted_llm import ScriptedLlm, empty, plain, raw, reply, tool

pytest.importorskip("wbcore_agent")
pytest.importorskip("wbcore_llm_openai")
pytest.importorskip("wbcore_llm_anthropic")

PLUGINS = ["brokers-state", "agent", "act", "llm-openai", "llm-anthropic"]
KEY = "sk-bounds-secret"
AGENT = """* Bounded :agent:
  :PROPERTIES:
  :ID: bounded
  :MODEL: {model}
  :END:
** System prompt
Be brief.
"""


@pytest.fixture(params=["openai", "anthropic"])
def world(request, make_runtime, tmp_path):
    with ScriptedLlm(request.param) as llm:
        rt = make_runtime(plugins=PLUGINS, env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY,
                                                "WB_LLM_BACKOFF": "0.01", "WB_LLM_RETRIES": "1"})
        agent = tmp_path / "bounded.org"
        agent.write_text(AGENT.format(model=f"{llm.format}:m"))
        yield rt, llm, agent


def state(rt, rec):
    ctx = rt.dock.context(principal=Principal("dev", "agent.bounded"), caps={"vfs"},
                          instance=f"agent-{rec.run_id}")
    return json.loads(rt.dock.call(ctx, "vfs", "read",
                                   {"path": "agent/state.json", "volume": "memory"})["data"])


def tool_answers(llm, n):
    body = llm.requests[n].body
    if "system" in body or llm.format == "anthropic":
        return [b for m in body["messages"] if m["role"] == "user" for b in m["content"]
                if isinstance(b, dict) and b.get("type") == "tool_result"]
    return [m for m in body["messages"] if m["role"] == "tool"]


def test_ten_thousand_calls_in_one_reply(world):
    rt, llm, agent = world
    llm.script = [reply(*[tool("wb", op="list")] * 10_000), reply(tool("done", result="ok"))]
    rec = rt.agent(agent, "flood")
    assert rec.status == "done" and rec.result == "ok"
    answers = tool_answers(llm, 1)
    assert len(answers) == 10_000
    text = [a.get("content") for a in answers]
    assert sum(1 for t in text
               if str(t).startswith("refused: this reply asked for 10000 tool calls")) == 10_000 - 16
    assert state(rt, rec)["status"] == "done"


def test_a_17_mib_argument_is_a_tool_error_and_the_run_goes_on(world):
    rt, llm, agent = world
    llm.script = [reply(tool("vfs_write", path="big", content="x" * (17 << 20))),
                  reply(tool("done", result="ok"))]
    rec = rt.agent(agent, "write big")
    assert rec.status == "done" and rec.result == "ok"
    (answer,) = tool_answers(llm, 1)
    assert "over the 1048576-byte cap" in str(answer["content"])
    assert state(rt, rec)["status"] == "done"


def test_a_server_that_ignores_stream_is_handled(world):
    rt, llm, agent = world
    llm.script = [plain(reply(tool("wb", op="list"))), plain(reply(text="all done"))]
    rec = rt.agent(agent, "plain bodies")
    assert rec.status == "done" and rec.result == "all done" and rec.steps == 2
    assert all(r.body["stream"] for r in llm.requests)


def test_empty_and_foreign_answers_are_named_errors_with_the_state_saved(world):
    rt, llm, agent = world
    llm.script = [empty(), empty()]
    rec = rt.agent(agent, "nothing")
    assert rec.status == "error" and "answer was empty" in rec.error and "after 2 attempts" in rec.error
    assert state(rt, rec)["status"] == "error"
    llm.script = [raw(b"<html>login</html>", "text/html")]
    rec = rt.agent(agent, "html")
    assert rec.status == "error" and "text/html" in rec.error and KEY not in rec.error
