"""Entry point of wbcore-llm-openai. The SDK is imported by the factory, never at plugin import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Availability, LlmProvider


def _available() -> Availability:
    import importlib.util

    if importlib.util.find_spec("openai") is None:
        return Availability.no("the openai SDK is not installed (pip install openai)")
    return Availability.yes()


def _driver(runtime: Any, settings: Any) -> Any:
    from wbcore_llm_openai.chat import OpenAIChat

    return OpenAIChat(settings)


@hookimpl
def wbcore_llm_providers() -> Iterator[LlmProvider]:
    yield LlmProvider(name="openai", summary="OpenAI-compatible chat completions (hosted, llama.cpp, vLLM, Ollama)",
                      factory=_driver, available=_available)
