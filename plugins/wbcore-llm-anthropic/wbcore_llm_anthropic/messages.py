"""The Messages API on the official ``anthropic`` SDK: native tool use, streamed answers.

Tool results travel as ``tool_result`` blocks in a user turn (the API's rule), so
consecutive ``tool`` messages are folded into one user message. The SDK's own retries
are off: the core's one policy (``wbcore_runtime.llm.with_retries``) retries 429/5xx/529 and
lost connections. Proxies from the environment are ignored; the key goes to the SDK only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wbcore_runtime.llm import (
    ChatRequest,
    ChatResponse,
    LlmSettings,
    Message,
    ProviderError,
    ToolUse,
    Usage,
    parse_arguments,
    provider_error,
    with_retries,
)


def wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Provider-neutral turns as Messages API turns (alternating user / assistant)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.text or "(empty)",
                          **({"is_error": True} if m.is_error else {})}])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in m.tool_calls]
            add("assistant", blocks or [{"type": "text", "text": "(no answer)"}])
        else:
            add("user", [{"type": "text", "text": m.text or "(empty)"}])
    return out


class AnthropicMessages:
    def __init__(self, settings: LlmSettings) -> None:
        import anthropic

        self.settings = settings
        self._anthropic = anthropic
        kw: dict[str, Any] = {}
        if settings.base_url:
            kw["base_url"] = settings.base_url
        self._client = anthropic.Anthropic(
            api_key=settings.api_key or "not-needed", max_retries=0, timeout=settings.timeout_s,
            http_client=anthropic.DefaultHttpxClient(trust_env=False, timeout=settings.timeout_s), **kw)

    def __repr__(self) -> str:  # never the key
        return f"AnthropicMessages({self.settings.base_url or 'default endpoint'}, model={self.settings.model!r})"

    def close(self) -> None:
        self._client.close()

    def complete(self, request: ChatRequest, *, on_text: Callable[[str], None] | None = None) -> ChatResponse:
        return with_retries(lambda: self._once(request, on_text), self.settings, deadline=request.deadline)

    def _error(self, exc: Exception) -> ProviderError:
        sdk = self._anthropic
        return provider_error("anthropic", exc, self.settings, status_error=sdk.APIStatusError,
                              connection_error=sdk.APIConnectionError)

    def _once(self, request: ChatRequest, on_text: Callable[[str], None] | None) -> ChatResponse:
        s = self.settings
        kw: dict[str, Any] = {"model": s.model, "messages": wire_messages(request.messages),
                              "max_tokens": request.max_tokens or s.max_tokens}
        if request.system:
            kw["system"] = request.system
        if request.tools:
            kw["tools"] = [{"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
                           for t in request.tools]
            if request.tool_choice is not None:  # the Messages API's words: auto, any (= required), none, tool
                kw["tool_choice"] = ({"type": {"required": "any"}.get(request.tool_choice, request.tool_choice)}
                                     if request.tool_choice in ("auto", "required", "none")
                                     else {"type": "tool", "name": request.tool_choice})
        if request.temperature is not None:
            kw["temperature"] = request.temperature
        try:
            client = self._client if request.deadline is None else self._client.with_options(
                timeout=request.timeout(s.timeout_s))
            with client.messages.stream(**kw) as stream:
                for delta in stream.text_stream:
                    if on_text is not None and delta:
                        on_text(delta)
                final = stream.get_final_message()
        except self._anthropic.AnthropicError as exc:
            raise self._error(exc) from None
        text: list[str] = []
        uses: list[ToolUse] = []
        for block in final.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                uses.append(ToolUse(block.id, block.name, parse_arguments(block.input, block.name)))
        u = final.usage
        tin, tout = int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0)
        return ChatResponse("".join(text), tuple(uses), final.stop_reason or "end_turn",
                            Usage(tin, tout, s.cost(final.model or s.model, tin, tout)), final.model or s.model)
