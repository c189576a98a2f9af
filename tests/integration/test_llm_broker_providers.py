"""The ``llm`` cap through an installed provider plugin (the core's contract): a guest's
completion comes from the Anthropic Messages API (scripted on loopback), retried by the
core's policy, cut by the call's byte budget while it streams, bounded by its deadline."""

from __future__ import annotations

import time

import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, WbError
from wbcore_testing.scripted_llm import ScriptedLlm, Turn, failure, reply

pytest.importorskip("wbcore_llm")
pytest.importorskip("wbcore_llm_anthropic")

KEY = "sk-broker-secret"


@pytest.fixture
def rt(make_runtime):
    with ScriptedLlm("anthropic") as llm:
        runtime = make_runtime(plugins=["llm", "llm-anthropic"], env={
            "WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY, "WB_LLM_MODEL": "claude-x",
            "WB_LLM_BACKOFF": "0.01"})
        runtime.scripted = llm
        yield runtime


def ctx(rt, **kw):
    return rt.dock.context(principal=Principal("t", "guest"), caps={"llm"}, **kw)


def test_guest_completion_through_the_provider(rt):
    llm = rt.scripted
    llm.script = [failure(529), reply(text="hello guest")]
    got = rt.dock.call(ctx(rt), "llm", "complete", {"messages": [
        {"role": "system", "content": "be kind"}, {"role": "user", "content": "hi"}]})
    assert got["text"] == "hello guest" and got["model"] == "claude-x" and got["usage"]["prompt_tokens"] == 11
    body = llm.requests[-1].body
    assert (body["system"] == "be kind"
            and body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert len(llm.requests) == 2  # the 529 was retried
    rt.dock.audit.flush()
    assert KEY not in (rt.home / "audit" / "audit.jsonl").read_text()


def test_answer_is_cut_by_the_byte_budget_while_it_streams(rt):
    rt.scripted.script = [reply(text=" ".join(["word"] * 200))]
    with pytest.raises(InvalidArgs, match="llm.complete"):
        rt.dock.call(ctx(rt, max_response=64), "llm", "complete", {"prompt": "talk"})


def test_a_slow_endpoint_is_bounded_by_the_call_deadline(rt):
    rt.scripted.script = [Turn(text="late", delay_s=3.0)]
    t0 = time.monotonic()
    with pytest.raises(WbError) as exc:
        rt.dock.call(ctx(rt, timeout=0.5), "llm", "complete", {"prompt": "hurry"})
    assert time.monotonic() - t0 < 2.5 and KEY not in str(exc.value)
