"""Entry point of wbcore-llm."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _llm(runtime: Any) -> Any:
    from wbcore_llm.broker import LlmBroker

    env = runtime.env
    return LlmBroker(env.get("WB_LLM_BASE_URL"), env.get("WB_LLM_API_KEY"), env.get("WB_LLM_MODEL"),
                     tuple(env.get("WB_LLM_MODELS", "").split()), runtime=runtime)


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="llm",
                 summary="llm-complete on the deployer's endpoint (an installed LLM provider, else "
                         "OpenAI-compatible); the host holds the key",
                 factory=_llm, operations=("complete",))
