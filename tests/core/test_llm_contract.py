"""The LLM provider contract (wbcore_runtime.contract.llm): settings, model specs, the one retry policy, cost,
and the key kept out of reprs and errors. Core only: providers here are in-process plugins."""

from __future__ import annotations

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.llm import (
    ChatResponse,
    LlmSettings,
    Message,
    ProviderError,
    ToolUse,
    Usage,
    parse_arguments,
    settings,
    split_model,
    with_retries,
)
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import RECORD_KINDS, LlmProvider

YES = Availability.yes()


def provider(name: str, available: Availability = YES):
    class P:
        @hookimpl
        def wbcore_llm_providers(self):
            yield LlmProvider(name=name, summary=f"{name} test", factory=lambda rt, s: ("driver", s),
                              available=lambda: available)

    P.__name__ = f"P_{name}"
    return P()


def test_llm_providers_are_a_registry_kind(make_runtime):
    assert RECORD_KINDS["wbcore_llm_providers"] is LlmProvider
    rt = make_runtime(plugins=[provider("alpha")])
    assert rt.llm_providers.names() == ["alpha"]


def test_model_spec_prefix_counts_only_for_installed_providers():
    assert split_model("anthropic:claude-x", ["anthropic", "openai"]) == ("anthropic", "claude-x")
    assert split_model("llama3:8b", ["anthropic", "openai"]) == (None, "llama3:8b")
    assert split_model(None, ["openai"]) == (None, None)


def test_settings_precedence_cli_then_agent_then_env(make_runtime):
    rt = make_runtime(plugins=[provider("alpha"), provider("beta")],
                      env={"WB_LLM_MODEL": "env-model", "WB_LLM_PROVIDER": "beta", "WB_LLM_API_KEY": "sk-k"})
    assert (settings(rt).provider, settings(rt).model) == ("beta", "env-model")
    s = settings(rt, agent_model="alpha:agent-model")
    assert (s.provider, s.model) == ("alpha", "agent-model")
    s = settings(rt, model="cli-model", agent_model="alpha:agent-model")
    assert (s.provider, s.model) == ("beta", "cli-model")
    assert "sk-k" not in repr(s) and s.api_key == "sk-k"


def test_settings_errors_say_what_to_do(make_runtime):
    with pytest.raises(NotFound, match="pip install wbcore-llm-openai"):
        settings(make_runtime(plugins=[]), model="m")
    two = make_runtime(plugins=[provider("alpha"), provider("beta")])
    with pytest.raises(InvalidArgs, match="WB_LLM_PROVIDER"):
        settings(two, model="m")
    with pytest.raises(NotFound, match="unknown LLM provider 'gamma'"):
        settings(make_runtime(plugins=[provider("alpha")], env={"WB_LLM_PROVIDER": "gamma"}), model="m")
    with pytest.raises(InvalidArgs, match="no model chosen"):
        settings(make_runtime(plugins=[provider("alpha")]))
    with pytest.raises(InvalidArgs, match="WB_LLM_RETRIES"):
        settings(make_runtime(plugins=[provider("alpha")], env={"WB_LLM_RETRIES": "99"}), model="m")
    with pytest.raises(InvalidArgs, match="WB_LLM_PRICES"):
        settings(make_runtime(plugins=[provider("alpha")], env={"WB_LLM_PRICES": "m=cheap"}), model="m")


def test_unavailable_provider_says_why(make_runtime):
    rt = make_runtime(plugins=[provider("alpha", Availability.no("the alpha SDK is not installed"))])
    with pytest.raises(NotFound, match="alpha SDK is not installed"):
        rt.llm("m")
    ok = make_runtime(plugins=[provider("beta")])
    assert ok.llm("m")[1].model == "m"


def _answer() -> ChatResponse:
    return ChatResponse("hi", (), "stop", Usage(1, 1), "m")


def test_retries_are_bounded_and_back_off():
    s = LlmSettings("p", "m", max_retries=3, backoff_s=0.5)
    waits: list[float] = []
    fails = [ProviderError("HTTP 429", status=429, retryable=True, retry_after=2.0),
             ProviderError("HTTP 503", status=503, retryable=True)]

    def attempt():
        if fails:
            raise fails.pop(0)
        return _answer()

    got = with_retries(attempt, s, sleep=waits.append)
    assert got.attempts == 3 and waits == [2.0, 1.0]  # the server's retry-after, then 0.5·2¹
    calls = []

    def always():
        calls.append(1)
        raise ProviderError("HTTP 500", status=500, retryable=True)

    with pytest.raises(ProviderError, match="after 4 attempts"):
        with_retries(always, s, sleep=waits.append)
    assert len(calls) == 4 and max(waits) <= 8.0


def test_non_retryable_errors_surface_at_once():
    calls = []

    def attempt():
        calls.append(1)
        raise ProviderError("HTTP 400: bad request", status=400)

    with pytest.raises(ProviderError, match="HTTP 400: bad request$"):
        with_retries(attempt, LlmSettings("p", "m", max_retries=5), sleep=lambda s: None)
    assert len(calls) == 1


def test_cost_and_redaction():
    s = LlmSettings("p", "m", api_key="sk-abc", prices={"m": (3.0, 15.0)})
    assert s.cost("m", 1_000_000, 100_000) == pytest.approx(4.5)
    assert LlmSettings("p", "m").cost("m", 10, 10) is None  # unpriced: no made-up figure
    assert s.redact("key sk-abc leaked") == "key [redacted] leaked"
    # A short key (local servers take any) is redacted as a whole token, never letter by letter.
    short = LlmSettings("p", "m", api_key="x")
    assert short.redact("max(x, y) = x; box") == "max([redacted], y) = [redacted]; box"
    assert LlmSettings("p", "m", api_key="k1").redact("k1k1 k1") == "k1k1 [redacted]"
    assert ((Usage(1, 2, 0.5) + Usage(3, 4, None)).as_dict()
            == {"input_tokens": 4, "output_tokens": 6, "cost_usd": 0.5})


def test_messages_round_trip_and_arguments():
    m = Message("assistant", "x", (ToolUse("c1", "wb", {"op": "list"}),))
    assert Message.from_dict(m.as_dict()) == m
    t = Message("tool", "oops", tool_call_id="c1", is_error=True)
    assert Message.from_dict(t.as_dict()) == t
    assert parse_arguments('{"a": 1}', "t") == {"a": 1}
    assert parse_arguments("not json", "t") == {"_invalid_json": "not json"}
    assert parse_arguments("[1]", "t") == {"_invalid_json": "[1]"}
    assert parse_arguments({"b": 2}, "t") == {"b": 2} and parse_arguments("", "t") == {}
    # nested past the one JSON bound (contract.jsonbound): malformed, never a RecursionError
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert parse_arguments(deep, "t") == {"_invalid_json": deep[:2000]}


def test_no_agent_loop_says_what_to_install(make_runtime):
    with pytest.raises(NotFound, match="pip install wbcore-agent"):
        make_runtime(plugins=[]).agent("a.org", "task")


def test_tool_choice_is_a_word_or_an_offered_tool_and_usage_estimates_are_marked() -> None:
    from wbcore_runtime.contract.llm import ChatRequest, ToolSpec, check_tool_choice, estimate_usage

    tools = (ToolSpec("wb", "toolkits", {"type": "object"}),)
    assert [check_tool_choice(c, tools) for c in (None, "auto", "required", "none", "wb")] == \
        [None, "auto", "required", "none", "wb"]
    with pytest.raises(InvalidArgs,
                       match=r"'b64__b64' is neither auto, required, none "
                             r"nor an offered tool \(offered: wb\)"):
        check_tool_choice("b64__b64", tools)
    req = ChatRequest("s" * 40, (Message("user", "u" * 400),), tools)
    u = estimate_usage(req, "t" * 40, (ToolUse("c", "wb", {"op": "list"}),))
    assert (u.estimated and u.input_tokens >= 110 and u.output_tokens >= 10
            and u.as_dict()["estimated"] is True)
    total = Usage(5, 5) + u
    assert total.estimated and total.input_tokens == 5 + u.input_tokens
    assert "estimated" not in Usage(1, 2).as_dict() and not (Usage(1, 2) + Usage(3, 4)).estimated
