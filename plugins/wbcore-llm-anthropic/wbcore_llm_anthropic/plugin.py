"""Entry point of wbcore-llm-anthropic. The SDK is imported by the factory, never at plugin import."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import sdk_provider
from wbcore_runtime.contract.records import LlmProvider


@hookimpl
def wbcore_llm_providers() -> Iterator[LlmProvider]:
    yield sdk_provider(
        "anthropic", "Anthropic Messages API (tool use, streaming)",
        "wbcore_llm_anthropic.messages:AnthropicMessages")
