"""The anthropic provider against a scripted Messages API server on loopback (real HTTP)."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract.errors import Timeout
from wbcore_runtime.contract.llm import ChatRequest, Message, ProviderError, ToolSpec, ToolUse
from wbcore_testing.loopback import ends_within
from wbcore_testing.scripted_llm import ScriptedLlm, Turn, empty, endless, failure, plain, raw, reply, tool

KEY = "sk-ant-test-secret"
SCHEMA = {"type": "object", "properties": {"op": {"type": "string"}}, "required": ["op"]}


@pytest.fixture
def llm():
    with ScriptedLlm("anthropic") as server:
        yield server


def driver(make_runtime, llm, **env):
    rt = make_runtime(plugins=["llm-anthropic"], env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY,
                                                       "WB_LLM_BACKOFF": "0.01",
                                                      "WB_LLM_PRICES": "claude-x=3/15", **env})
    return rt.llm("claude-x")  # the only provider installed: no prefix needed


def test_streamed_tool_use_text_usage_and_cost(make_runtime, llm):
    llm.script = [reply(tool("wb", op="list"), text="looking now")]
    d = driver(make_runtime, llm)
    deltas: list[str] = []
    got = d.complete(ChatRequest("be brief", (Message("user", "hi"),), (ToolSpec("wb", "toolkits", SCHEMA),)),
                     on_text=deltas.append)
    assert got.text == "looking now" and deltas == ["looking ", "now"]
    assert got.tool_calls == (ToolUse("toolu_0", "wb", {"op": "list"}),)
    assert got.usage.input_tokens == 11 and got.usage.output_tokens == 7
    assert got.usage.cost_usd == pytest.approx((11 * 3 + 7 * 15) / 1e6)
    req = llm.requests[0]
    assert req.path == "/v1/messages" and KEY in (
        req.headers.get("x-api-key"), req.headers.get("authorization", "").removeprefix("Bearer "))
    assert req.body["system"] == "be brief" and req.body["tools"][0]["input_schema"] == SCHEMA
    assert KEY not in repr(d)


def test_tool_results_are_folded_into_one_user_turn(make_runtime, llm):
    llm.script = [reply(text="fine")]
    calls = (ToolUse("toolu_0", "wb", {"op": "list"}), ToolUse("toolu_1", "vfs_read", {"path": "x"}))
    msgs = (Message("user", "go"), Message("assistant", "two tools", calls),
            Message("tool", "[]", tool_call_id="toolu_0"),
            Message("tool", "no file", tool_call_id="toolu_1", is_error=True))
    driver(make_runtime, llm).complete(ChatRequest("", msgs))
    sent = llm.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][1] == {"type": "tool_use", "id": "toolu_0", "name": "wb",
                                     "input": {"op": "list"}}
    assert sent[2]["content"][1] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "no file",
                                     "is_error": True}


def test_overload_is_retried_then_surfaced(make_runtime, llm):
    llm.script = [failure(529), failure(429), reply(text="ok")]
    assert driver(make_runtime, llm).complete(ChatRequest("", (Message("user", "x"),))).attempts == 3
    llm.script = [failure(503)] * 2
    with pytest.raises(ProviderError, match=r"HTTP 503.*after 2 attempts") as exc:
        driver(make_runtime, llm, WB_LLM_RETRIES="1").complete(ChatRequest("", (Message("user", "x"),)))
    assert KEY not in str(exc.value)


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


def test_a_stream_of_pings_ends_at_the_request_timeout(make_runtime, llm):
    """The Messages API's own keep-alive (``event: ping``) every 0.1 s for ever: the request's
    timeout bounds the whole exchange, not each read."""
    llm.script = [endless("text/event-stream", b'event: ping\ndata: {"type": "ping"}\n\n', every_s=0.1)]
    d = driver(make_runtime, llm, WB_LLM_TIMEOUT="2", WB_LLM_RETRIES="0")
    err, took = ends_within(lambda: d.complete(ChatRequest("", (Message("user", "x"),))), 20,
                            "a completion streaming pings")
    assert isinstance(err, Timeout) and "within 2 s" in str(err) and took < 10


def test_a_redirect_is_not_followed_and_the_key_goes_nowhere_else(make_runtime, llm):
    """The key is for the endpoint the deployer configured: a redirect elsewhere (a compromised
    gateway, a metadata address) is named in the error, never followed with ``x-api-key``."""
    with ScriptedLlm("anthropic") as elsewhere:
        elsewhere.script = [reply(text="from elsewhere")]

        def away(h):
            h.send_response(307)
            h.send_header("Location", f"{elsewhere.base_url}/v1/messages")
            h.send_header("Content-Length", "0")
            h.end_headers()

        llm.script = [Turn(wire=away)]
        with pytest.raises(ProviderError, match=r"HTTP 307.*redirect") as exc:
            driver(make_runtime, llm, WB_LLM_RETRIES="0").complete(ChatRequest("", (Message("user", "x"),)))
        assert elsewhere.requests == [] and KEY not in str(exc.value)
