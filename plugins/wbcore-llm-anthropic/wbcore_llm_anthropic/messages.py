"""The Messages API on the official ``anthropic`` SDK: native tool use, streamed answers.

Tool results travel as ``tool_result`` blocks in a user turn (the API's rule), so
consecutive ``tool`` messages are folded into one user message. The SDK's own retries
are off: the core's one policy (``wbcore_runtime.contract.llm.with_retries``) retries 429/5xx/529 and
lost connections. Proxies from the environment are ignored; the key goes to the SDK only.
A server that ignores ``stream`` and answers with one JSON body is read as that body; any
other content type is a named error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wbcore_runtime.contract.llm import (ChatRequest, ChatResponse, LlmSettings, Message, ProviderError,
                                         ToolUse)
from wbcore_runtime.contract.llm import SdkChat, Usage, parse_arguments


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
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "",
                          "content": m.text or "(empty)", **({"is_error": True} if m.is_error else {})}])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                       for c in m.tool_calls]
            add("assistant", blocks or [{"type": "text", "text": "(no answer)"}])
        else:
            add("user", [{"type": "text", "text": m.text or "(empty)"}])
    return out


class AnthropicMessages(SdkChat):
    vendor = "anthropic"
    endpoint_kind = "Messages API endpoint"

    def __init__(self, settings: LlmSettings) -> None:
        import anthropic

        super().__init__(settings, anthropic, anthropic.Anthropic,
                         **({"base_url": settings.base_url} if settings.base_url else {}))

    def _once(self, request: ChatRequest, on_text: Callable[[str], None] | None) -> ChatResponse:
        s = self.settings
        kw: dict[str, Any] = {"model": s.model, "messages": wire_messages(request.messages),
                              "max_tokens": request.max_tokens or s.max_tokens}
        if request.system:
            kw["system"] = request.system
        if request.tools:
            kw["tools"] = [{"name": t.name, "description": t.description,
                            "input_schema": dict(t.input_schema)}
                           for t in request.tools]
            # the Messages API's words: auto, any (= required), none, tool
            if request.tool_choice is not None:
                kw["tool_choice"] = ({"type": {"required": "any"}.get(request.tool_choice,
                                                                      request.tool_choice)}
                                     if request.tool_choice in ("auto", "required", "none")
                                     else {"type": "tool", "name": request.tool_choice})
        if request.temperature is not None:
            kw["temperature"] = request.temperature
        try:
            with self._client_for(request).messages.stream(**kw) as stream:
                ctype = stream.response.headers.get("content-type", "")
                if ctype.split(";")[0].strip().lower() != "text/event-stream":
                    return self._whole(ctype, stream.response.read(), on_text)
                for delta in stream.text_stream:
                    if on_text is not None and delta:
                        on_text(delta)
                final = stream.get_final_message()
        except self._sdk.AnthropicError as exc:
            raise self._error(exc) from None
        blocks = [b.model_dump() if hasattr(b, "model_dump") else dict(b) for b in final.content]
        u = final.usage
        tin, tout = int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0)
        return self._answer(blocks, final.stop_reason or "end_turn", tin, tout, final.model or s.model)

    def _answer(self, blocks: list[Any], stop: str, tin: int, tout: int, model: str) -> ChatResponse:
        text: list[str] = []
        uses: list[ToolUse] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                text.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                name = str(block.get("name") or "")
                uses.append(ToolUse(str(block.get("id") or ""), name,
                                    parse_arguments(block.get("input"), name)))
        return ChatResponse("".join(text), tuple(uses), stop,
                            Usage(tin, tout, self.settings.cost(model, tin, tout)), model)

    def _whole(self, ctype: str, raw: bytes, on_text: Callable[[str], None] | None) -> ChatResponse:
        """A server that ignored ``stream``: its one JSON body, or a named error."""
        doc = self._whole_body(ctype, raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("content"), list):
            raise ProviderError("anthropic: the server answered a streamed request with a JSON body that has "
                                "no content list", retryable=True)
        u = doc.get("usage") or {}
        got = self._answer(doc["content"], str(doc.get("stop_reason") or "end_turn"),
                           int(u.get("input_tokens") or 0),
                           int(u.get("output_tokens") or 0), str(doc.get("model") or self.settings.model))
        if got.text and on_text is not None:
            on_text(got.text)
        return got
