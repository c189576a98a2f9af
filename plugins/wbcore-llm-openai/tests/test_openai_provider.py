"""The openai provider against a scripted OpenAI-compatible server on loopback (real HTTP)."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract.llm import ChatRequest, Message, ProviderError, ToolSpec, ToolUse
from wbcore_testing.scripted_llm import ScriptedLlm, empty, failure, plain, raw, reply, tool

KEY = "sk-openai-test-secret"
SCHEMA = {"type": "object", "properties": {"op": {"type": "string"}}, "required": ["op"]}


@pytest.fixture
def llm():
    with ScriptedLlm("openai") as server:
        yield server


def driver(make_runtime, llm, **env):
    rt = make_runtime(plugins=["llm-openai"], env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY,
                                                    "WB_LLM_BACKOFF": "0.01", "WB_LLM_PRICES": "gpt-x=2/8",
                                                   **env})
    return rt.llm("openai:gpt-x")


def test_streamed_tool_calls_text_usage_and_cost(make_runtime, llm):
    llm.script = [reply(tool("wb", op="list"), tool("done", result="ok"), text="let me look")]
    d = driver(make_runtime, llm)
    deltas: list[str] = []
    got = d.complete(ChatRequest("be brief", (Message("user", "hi"),), (ToolSpec("wb", "toolkits", SCHEMA),)),
                     on_text=deltas.append)
    assert got.text == "let me look" and len(deltas) == 3  # streamed word by word
    assert got.tool_calls == (ToolUse("call_0", "wb", {"op": "list"}),
                              ToolUse("call_1", "done", {"result": "ok"}))
    assert got.usage.input_tokens == 11 and got.usage.output_tokens == 7
    assert got.usage.cost_usd == pytest.approx((11 * 2 + 7 * 8) / 1e6)
    req = llm.requests[0]
    assert req.path == "/v1/chat/completions" and req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["stream"] is True and req.body["messages"][0] == {"role": "system", "content": "be brief"}
    assert req.body["tools"][0]["function"]["name"] == "wb"
    assert KEY not in repr(d)


def test_tool_results_go_back_in_native_form(make_runtime, llm):
    llm.script = [reply(text="fine")]
    d = driver(make_runtime, llm)
    msgs = (Message("user", "go"), Message("assistant", "", (ToolUse("call_0", "wb", {"op": "list"}),)),
            Message("tool", "[]", tool_call_id="call_0"))
    d.complete(ChatRequest("", msgs))
    sent = llm.requests[0].body["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "wb", "arguments": '{"op": "list"}'}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_0", "content": "[]"}


def test_rate_limits_and_server_faults_are_retried_then_surfaced(make_runtime, llm):
    llm.script = [failure(429), failure(503), reply(text="at last")]
    d = driver(make_runtime, llm, WB_LLM_RETRIES="3")
    got = d.complete(ChatRequest("", (Message("user", "x"),)))
    assert got.text == "at last" and got.attempts == 3
    llm.script = [failure(500)] * 3
    with pytest.raises(ProviderError, match=r"HTTP 500.*after 3 attempts") as exc:
        driver(make_runtime, llm, WB_LLM_RETRIES="2").complete(ChatRequest("", (Message("user", "x"),)))
    assert KEY not in str(exc.value)


def test_a_refused_key_is_not_retried_and_not_shown(make_runtime, llm):
    llm.script = [failure(401), reply(text="never")]
    with pytest.raises(ProviderError, match="refused the deployer's key") as exc:
        driver(make_runtime, llm).complete(ChatRequest("", (Message("user", "x"),)))
    assert len(llm.requests) == 1 and KEY not in str(exc.value)


def test_a_server_that_ignores_stream_is_read_as_its_json_body(make_runtime, llm):
    llm.script = [plain(reply(tool("wb", op="list"), text="from a plain body"))]
    deltas: list[str] = []
    got = driver(make_runtime, llm).complete(ChatRequest("", (Message("user", "x"),)), on_text=deltas.append)
    assert llm.requests[0].body["stream"] is True
    assert got.text == "from a plain body" and deltas == ["from a plain body"]
    assert [(c.name, dict(c.arguments)) for c in got.tool_calls] == [("wb", {"op": "list"})]
    assert got.usage.input_tokens == 11 and got.usage.output_tokens == 7


def test_an_empty_answer_is_retried_then_a_named_error(make_runtime, llm):
    llm.script = [empty(), reply(text="second try")]
    got = driver(make_runtime, llm, WB_LLM_RETRIES="2").complete(ChatRequest("", (Message("user", "x"),)))
    assert got.text == "second try" and got.attempts == 2
    llm.script = [empty(), raw(b'{"unexpected": true}'), empty()]
    with pytest.raises(ProviderError, match=r"(empty|no content|no choices).*after 3 attempts"):
        driver(make_runtime, llm, WB_LLM_RETRIES="2").complete(ChatRequest("", (Message("user", "x"),)))


def test_a_foreign_content_type_is_named(make_runtime, llm):
    llm.script = [raw(b"<html>a login page</html>", "text/html")]
    with pytest.raises(ProviderError, match=r"text/html.*neither server-sent events nor JSON"):
        driver(make_runtime, llm, WB_LLM_RETRIES="2").complete(ChatRequest("", (Message("user", "x"),)))
    assert len(llm.requests) == 1  # not retried: a wrong endpoint does not heal


def test_tool_choice_goes_on_the_wire_and_missing_usage_is_estimated(make_runtime, llm):
    """``tool_choice``: words as they are, a tool's name in the named-function form; a stream
    without a usage chunk gives counts estimated from characters, marked ``estimated``."""
    llm.script = [reply(tool("wb", op="list"), usage=False), reply(text="fine")]
    d = driver(make_runtime, llm)
    tools = (ToolSpec("wb", "toolkits", SCHEMA),)
    got = d.complete(ChatRequest("be brief", (Message("user", "x" * 400),), tools, tool_choice="wb"))
    assert llm.requests[0].body["tool_choice"] == {"type": "function", "function": {"name": "wb"}}
    assert got.usage.estimated and got.usage.input_tokens >= 100 and got.usage.output_tokens >= 1
    assert got.usage.as_dict()["estimated"] is True
    got = d.complete(ChatRequest("be brief", (Message("user", "hi"),), tools, tool_choice="required"))
    assert llm.requests[1].body["tool_choice"] == "required"
    assert not got.usage.estimated and (got.usage.input_tokens, got.usage.output_tokens) == (11, 7)
    assert "estimated" not in got.usage.as_dict()


def test_tool_arguments_nested_past_the_json_bound_are_invalid_json_not_a_crash(make_runtime, llm):
    # A model (or a server posing as one) answers with arguments nested 100,000 deep: json.loads
    # would raise RecursionError out of the provider and end the run; they are the model's
    # malformed arguments, which the loop answers with a tool error.
    import json

    deep = "[" * 100_000 + "]" * 100_000
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "wb", "arguments": deep}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    llm.script = [raw(json.dumps(body).encode())]
    got = driver(make_runtime, llm).complete(ChatRequest("", (Message("user", "x"),)))
    assert [c.name for c in got.tool_calls] == ["wb"]
    assert got.tool_calls[0].arguments["_invalid_json"].startswith("[[[")
