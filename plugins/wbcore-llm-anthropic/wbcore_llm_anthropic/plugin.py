"""Entry point of wbcore-llm-anthropic. The SDK is imported by the factory, never at plugin import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Availability, LlmProvider


def _available() -> Availability:
    import importlib.util

    if importlib.util.find_spec("anthropic") is None:
        return Availability.no("the anthropic SDK is not installed (pip install anthropic)")
    return Availability.yes()


def _driver(runtime: Any, settings: Any) -> Any:
    from wbcore_llm_anthropic.messages import AnthropicMessages

    return AnthropicMessages(settings)


@hookimpl
def wbcore_llm_providers() -> Iterator[LlmProvider]:
    yield LlmProvider(name="anthropic", summary="Anthropic Messages API (tool use, streaming)",
                      factory=_driver, available=_available)
