"""Entry point of wbcore-llm-openai. The SDK is imported by the factory, never at plugin import."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import sdk_provider
from wbcore_runtime.contract.records import LlmProvider


@hookimpl
def wbcore_llm_providers() -> Iterator[LlmProvider]:
    yield sdk_provider(
        "openai", "OpenAI-compatible chat completions (hosted, llama.cpp, vLLM, Ollama)",
        "wbcore_llm_openai.chat:OpenAIChat")
