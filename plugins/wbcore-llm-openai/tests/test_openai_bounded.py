"""The openai provider is bounded while the answer arrives, not once it is whole: a JSON body
that keeps growing is cut at the provider's cap, a compressed body is never inflated, and an
event stream kept open by keep-alive comments ends at the request's timeout (the whole
exchange, not each read). Real HTTP against a scripted server on loopback."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from wbcore_runtime.contract.errors import InvalidArgs, Timeout
from wbcore_runtime.contract.llm import ChatRequest, Message, ProviderError
from wbcore_testing.loopback import drip_headers, ends_within
from wbcore_testing.scripted_llm import ScriptedLlm, Turn, endless, raw

MiB = 1 << 20
#: How late a deadline may show on a loaded 2-core CI machine; the bounds below rule out waiting
#: for what the deadline cuts (a stream that never ends).
SLACK_S = 5.0


@pytest.fixture
def llm():
    with ScriptedLlm("openai") as server:
        yield server


def complete(make_runtime: Any, llm: ScriptedLlm, timeout_s: float) -> tuple[BaseException | None, float]:
    """One completion: what it raised and how long it took (a client that hangs fails the test)."""
    rt = make_runtime(plugins=["llm-openai"], env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_RETRIES": "0",
                                                    "WB_LLM_TIMEOUT": str(timeout_s)})
    d = rt.llm("openai:gpt-x")
    return ends_within(lambda: d.complete(ChatRequest("", (Message("user", "hi"),))), timeout_s + 3 * SLACK_S,
                       "the completion (no deadline for the whole exchange?)")


def test_an_event_stream_kept_alive_by_comments_ends_at_the_request_timeout(make_runtime, llm):
    llm.script = [endless("text/event-stream", b": keep-alive\n\n", every_s=0.1)]
    err, took = complete(make_runtime, llm, 2.0)
    assert isinstance(err, Timeout) and "2 s" in str(err), err
    assert took < 2.0 + SLACK_S


def test_a_json_body_that_keeps_growing_is_cut_at_the_cap(make_runtime, llm):
    sent = [0]
    llm.script = [endless("application/json", b"a" * MiB, head=b'{"choices": [{"message": {"content": "',
                          limit=160 * MiB, sent=sent)]
    err, _ = complete(make_runtime, llm, 20.0)
    assert isinstance(err, InvalidArgs) and f"{64 * MiB}-byte cap" in str(err), err
    assert sent[0] < 64 * MiB + 32 * MiB  # the cap plus what loopback socket buffers hold


def test_a_compressed_answer_is_refused_not_inflated(make_runtime, llm):
    doc = b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}'
    bomb = gzip.compress(doc + b" " * (128 * MiB), compresslevel=9)  # ~128 KiB on the wire
    llm.script = [raw(bomb, Content_Encoding="gzip")]
    err, _ = complete(make_runtime, llm, 20.0)
    assert isinstance(err, InvalidArgs) and "Content-Encoding gzip" in str(err), err
    assert llm.requests[0].headers["accept-encoding"] == "identity"


def test_headers_dripped_a_byte_at_a_time_end_at_the_request_timeout(make_runtime, llm):
    llm.script = [Turn(wire=drip_headers)]
    err, took = complete(make_runtime, llm, 2.0)
    assert isinstance(err, ProviderError) and "silent" in str(err), err
    assert took < 2.0 + SLACK_S
