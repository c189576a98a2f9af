"""Chat completions on the official ``openai`` SDK: native tool calls, streamed answers.

The SDK's own retries are off (``max_retries=0``): every provider retries through the
core's one policy (``wbcore_runtime.contract.llm.with_retries``). The HTTP client ignores proxy settings
from the environment (the deployer's endpoint is reached directly, as ``wbcore_runtime.guard.fetch``
does). The key is handed to the SDK and nowhere else; errors carry the status and a
redacted, shortened message.

A server that ignores ``stream`` and answers with one JSON body (some local servers do) is
read as that body (:func:`from_body`); any other content type is a named error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from wbcore_runtime.contract.llm import (
    ChatRequest,
    ChatResponse,
    LlmSettings,
    Message,
    ProviderError,
    SdkChat,
    ToolUse,
    Usage,
    estimate_usage,
    parse_arguments,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The most of a non-streamed body read (a chat answer is far smaller).
MAX_BODY = 64 << 20


def body_kind(content_type: str) -> str:
    """``stream`` (server-sent events), ``json`` (a server that ignored ``stream``) or ``other``."""
    ct = content_type.split(";")[0].strip().lower()
    if ct == "text/event-stream":
        return "stream"
    return "json" if ct == "application/json" or ct.endswith("+json") else "other"


def from_body(doc: Any, model: str) -> tuple[str, list[dict[str, str]], str, Usage, str]:
    """A whole chat-completion body: ``(text, calls, stop reason, usage, model)``; a body
    without ``choices`` is a named :class:`ProviderError`."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderError("openai: the server answered a streamed request with a JSON body that has no "
                            "choices (keys: "
                            f"{', '.join(sorted(doc)[:8]) if isinstance(doc, dict) else type(doc).__name__})",
                            retryable=True)
    msg = choices[0].get("message") or {}
    calls = [{"id": str(c.get("id") or ""), "name": str((c.get("function") or {}).get("name") or ""),
              "args": (c.get("function") or {}).get("arguments") or ""} for c in msg.get("tool_calls") or ()
             if isinstance(c, dict)]
    u = doc.get("usage") or {}
    usage = Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
    return (str(msg.get("content") or ""), calls, str(choices[0].get("finish_reason") or ""), usage,
            str(doc.get("model") or model))


def wire_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Provider-neutral turns as chat-completions messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text})
        elif m.role == "assistant":
            # a string even when the turn was only tool calls: llama-cpp-python's server refuses
            # null there (its schema and its chat template both read it), hosted APIs take ""
            msg: dict[str, Any] = {"role": "assistant", "content": m.text}
            if m.tool_calls:
                msg["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name,
                                                   "arguments": json.dumps(dict(c.arguments))}}
                                     for c in m.tool_calls]
            out.append(msg)
        else:
            out.append({"role": "user", "content": m.text})
    return out


def wire_tool_choice(choice: str) -> str | dict[str, Any]:
    """``auto`` / ``required`` / ``none`` as they are; a tool's name as the named-function form."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


class OpenAIChat(SdkChat):
    vendor = "openai"
    endpoint_kind = "chat-completions endpoint"
    max_body = MAX_BODY

    def __init__(self, settings: LlmSettings) -> None:
        import openai

        endpoint = settings.base_url or DEFAULT_BASE_URL
        super().__init__(settings, openai, openai.OpenAI, endpoint=endpoint, base_url=endpoint)

    def _once(self, request: ChatRequest, on_text: Callable[[str], None] | None) -> ChatResponse:
        s = self.settings
        kw: dict[str, Any] = {
            "model": s.model, "messages": wire_messages(request.system, request.messages), "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": request.max_tokens or s.max_tokens,
        }
        if request.tools:
            kw["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                             "parameters": dict(t.input_schema)}}
                          for t in request.tools]
            if request.tool_choice is not None:
                kw["tool_choice"] = wire_tool_choice(request.tool_choice)
        if request.temperature is not None:
            kw["temperature"] = request.temperature
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        stop, model = "", s.model
        usage: Usage | None = None  # None: the stream carried no usage (then it is estimated)
        try:
            stream = self._client_for(request).chat.completions.create(**kw)
            kind = body_kind(stream.response.headers.get("content-type", ""))
            if kind != "stream":
                try:
                    raw = stream.response.read()
                finally:
                    stream.close()
                doc = self._whole_body(stream.response.headers.get("content-type", ""), raw)
                body_text, body_calls, stop, usage, model = from_body(doc, s.model)
                if body_text and on_text is not None:
                    on_text(body_text)
                text.append(body_text)
                calls = dict(enumerate(body_calls))
                stream = None
            try:
                for chunk in stream or ():
                    model = getattr(chunk, "model", None) or model
                    u = getattr(chunk, "usage", None)
                    if u is not None:
                        usage = Usage(u.prompt_tokens or 0, u.completion_tokens or 0)
                    for choice in chunk.choices or ():
                        d = choice.delta
                        if d is not None and d.content:
                            text.append(d.content)
                            if on_text is not None:
                                on_text(d.content)
                        for tc in (d.tool_calls if d is not None else None) or ():
                            slot = calls.setdefault(tc.index if tc.index is not None else len(calls),
                                                    {"id": "", "name": "", "args": ""})
                            if tc.id:
                                slot["id"] = tc.id
                            if tc.function is not None:
                                slot["name"] += tc.function.name or ""
                                slot["args"] += tc.function.arguments or ""
                        if choice.finish_reason:
                            stop = choice.finish_reason
            finally:
                if stream is not None:
                    stream.close()
        except self._sdk.OpenAIError as exc:
            raise self._error(exc) from None
        uses = tuple(ToolUse(c["id"] or f"call_{i}", c["name"], parse_arguments(c["args"], c["name"]))
                     for i, c in sorted(calls.items()))
        if usage is None:
            usage = estimate_usage(request, "".join(text), uses)
        usage = Usage(usage.input_tokens, usage.output_tokens,
                      s.cost(model, usage.input_tokens, usage.output_tokens),
                      usage.estimated)
        return ChatResponse("".join(text), uses, stop or ("tool_calls" if uses else "stop"), usage, model)
