"""The chat handler the local server runs: llama-cpp-python's ``chatml-function-calling``
(its chat template and grammar-constrained tool calls), with three gaps closed.

Imported only inside the server process (``python -m wbcore_llm_local.serve``).

1. Offered tools with no ``tool_choice`` mean ``auto`` (the OpenAI default); the upstream
   handler instead drops the tools and never lets the model call one.
2. ``auto`` while streaming raises upstream when the model picks a tool ("Automatic
   streaming tool choice is not supported"): with tools offered, the answer (text or tool
   calls) is made whole, then sent as chat-completion chunks (one delta per call), its
   token usage in a last chunk.
3. ``required`` (the model must call some tool) is refused with a clear message rather
   than an assertion: name the tool instead, or use ``auto``.
4. ``auto`` generates its text answer and its tool arguments with no token limit (upstream
   passes ``max_tokens=None``: up to the whole context, minutes on 2 cores): the
   request's ``max_tokens`` bounds every completion of the answer.

A request without tools streams token by token as upstream does; that path reports no
usage (the client estimates it and says so).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llama_cpp import llama_chat_format

NAME = "wbcore-chatml-tools"
#: The bound of an ``auto`` answer's completions when the request sets none.
DEFAULT_MAX_TOKENS = 512


def _chunks(resp: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A whole chat completion as the chunks a streaming client reads."""
    base = {"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"],
            "model": resp["model"]}
    choice = resp["choices"][0]
    msg = choice["message"]
    calls = [{"index": i, "id": c["id"], "type": "function",
              "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
             for i, c in enumerate(msg.get("tool_calls") or [])]
    delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if calls:
        delta["tool_calls"] = calls
    yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {},
                                "finish_reason": choice.get("finish_reason") or "stop", "logprobs": None}]}
    if resp.get("usage"):
        yield {**base, "choices": [], "usage": resp["usage"]}


class _Capped:
    """``llama`` whose ``create_completion`` gets ``limit`` where the caller passed no
    ``max_tokens`` (the upstream handler's ``auto`` path); everything else is ``llama``'s."""

    def __init__(self, llama: Any, limit: int) -> None:
        self._llama, self._limit = llama, limit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, *args: Any, **kw: Any) -> Any:
        if kw.get("max_tokens") is None:
            kw["max_tokens"] = self._limit
        return self._llama.create_completion(*args, **kw)


def handler(llama: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
            tool_choice: Any = None, stream: bool = False, **kw: Any) -> Any:
    if tools and tool_choice is None:
        tool_choice = "auto"
    if tool_choice == "required":
        raise ValueError("tool_choice 'required' is not supported by this local server (llama-cpp-python's "
                         "chatml-function-calling); name the tool ({'type': 'function', 'function': {'name': "
                         "...}}) or use 'auto'")
    upstream = llama_chat_format.chatml_function_calling
    if not stream or not tools or tool_choice == "none":
        return upstream(llama, messages, tools=tools, tool_choice=tool_choice, stream=stream, **kw)
    if isinstance(tool_choice, dict):  # a named tool: the whole call, then its chunks (with usage)
        return _chunks(upstream(llama, messages, tools=tools, tool_choice=tool_choice, stream=False, **kw))
    # auto: the answer (a message or tool calls) is made whole, bounded, then sent as chunks
    limit = kw.get("max_tokens") or DEFAULT_MAX_TOKENS
    return _chunks(upstream(_Capped(llama, limit), messages, tools=tools, tool_choice="auto", stream=False,
                            **kw))


def register() -> None:
    llama_chat_format.register_chat_completion_handler(NAME)(handler)
