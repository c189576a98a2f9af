"""Entry point of wbcore-llm-anthropic. The SDK is imported by the factory, never at plugin import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.records import Availability, LlmProvider


def _available() -> Availability:
    from wbcore_runtime.llm import sdk_availability

    return sdk_availability("anthropic")


def _driver(runtime: Any, settings: Any) -> Any:
    from wbcore_llm_anthropic.messages import AnthropicMessages

    return AnthropicMessages(settings)


@hookimpl
def wbcore_llm_providers() -> Iterator[LlmProvider]:
    yield LlmProvider(name="anthropic", summary="Anthropic Messages API (tool use, streaming)",
                      factory=_driver, available=_available)
