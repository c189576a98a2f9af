"""The ``llm`` broker: a guest asks for a completion; the host holds the key.

The endpoint is the deployer's, set in the runtime's environment:
``WB_LLM_BASE_URL`` (e.g. ``https://api.openai.com/v1``; ``/chat/completions`` is
appended), ``WB_LLM_API_KEY`` (sent as a bearer token, never shown), ``WB_LLM_MODEL``
(the default model) and optionally ``WB_LLM_MODELS`` (space-separated models a guest
may pick). Because the deployer chose it, the endpoint is not subject to NetGuard (it
may be a local server); the guest cannot change it. The connection is made by the core
fetcher's client (``wbcore_runtime.guard.fetch.client``: system trust store, no proxies from the environment).
Prompts, completions, tokens and the wait are all capped; the endpoint's answer is read raw
(``Accept-Encoding: identity``, no decompression) and taken from a
:class:`~wbcore_runtime.dispatch.budget.ByteBudget` of ``min(4 MiB, max_response)`` chunk by chunk, so a
runaway answer is cancelled at the cap plus one network read.

When an LLM provider plugin is installed (``wbcore_llm_providers``: wbcore-llm-openai,
wbcore-llm-anthropic), the answer comes through it instead — the core's contract
(``Runtime.llm``): the provider chosen by ``WB_LLM_PROVIDER`` (or the only one), the same
key and endpoint settings, the core's bounded retries, and the answer streamed into the
same byte budget, delta by delta, so it is cut while it arrives.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from wbcore_runtime.guard import deadline as _deadline
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.dispatch.audit import redact_target
from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, NotFound, Timeout

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

MAX_PROMPT = 1 << 20
MAX_RESPONSE = 4 << 20
MAX_TOKENS = 8192
MAX_MESSAGES = 256
ROLES = ("system", "user", "assistant")


class LlmBroker:
    def __init__(self, base_url: str | None, api_key: str | None, model: str | None,
                 models: tuple[str, ...] = (), runtime: Any = None) -> None:
        self.base_url = (base_url or "").rstrip("/")
        self._key = api_key or ""
        self.model = model or ""
        self.models = models
        #: set when a provider plugin is installed: answers come through ``runtime.llm``
        self._runtime = runtime if runtime is not None and len(runtime.llm_providers) else None
        self._drivers: dict[str, Any] = {}

    def __repr__(self) -> str:  # the key (nor a base URL's user-info) never appears in a repr
        return f"LlmBroker({redact_target(self.base_url) or 'unconfigured'}, model={self.model!r})"

    def handle(self, call: BrokerCall) -> Any:
        if not self.model or (not self.base_url and self._runtime is None):
            raise NotFound("llm: no endpoint configured (the deployer sets WB_LLM_BASE_URL and WB_LLM_MODEL)")
        messages = call.args.get("messages")
        if messages is None:
            messages = [{"role": "user", "content": call.arg("prompt", str)}]
        if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
            raise InvalidArgs(f"llm.complete: 'messages' must be 1..{MAX_MESSAGES} maps {{role, content}}")
        size = 0
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise InvalidArgs(f"llm.complete: each message needs role ({', '.join(ROLES)}) and text "
                                  "content")
            size += len(m["content"].encode())
        if size > MAX_PROMPT:
            raise refuse(InvalidArgs, "too-large",
                         f"llm.complete: prompt of {size} bytes exceeds {MAX_PROMPT}")
        model = call.arg("model", str, self.model)
        if model != self.model and model not in self.models:
            raise refuse(CapabilityDenied, "model",
                         f"llm.complete: model {model!r} is not offered; offered: "
                         f"{', '.join((self.model, *self.models))}")
        max_tokens = min(call.arg("max_tokens", int, 1024), MAX_TOKENS)
        body: dict[str, Any] = {"model": model,
                                "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                                "max_tokens": max_tokens}
        if "temperature" in call.args:
            body["temperature"] = float(call.arg("temperature", (int, float)))
        if self._runtime is not None:
            return self._via_provider(self._runtime, call, body)
        call.target(self.base_url + "/chat/completions")
        return self._post(body, call.ctx.remaining(60.0),
                          ByteBudget.for_call(call, MAX_RESPONSE, "llm.complete: endpoint answer"))

    def _via_provider(self, runtime: Runtime, call: BrokerCall, body: dict[str, Any]) -> dict[str, Any]:
        from wbcore_runtime.contract import llm

        wait = call.ctx.remaining(60.0)
        if wait <= 0:
            raise refuse(Timeout, "deadline", "llm.complete: no time left before the deadline")
        model = body["model"]
        drv = self._drivers.get(model)
        if drv is None:
            drv = self._drivers[model] = llm.driver(runtime, llm.settings(runtime, model=model))
        call.target(f"{drv.settings.provider}:{drv.settings.base_url or 'default'}")
        budget = ByteBudget.for_call(call, MAX_RESPONSE, "llm.complete: endpoint answer")
        system = "\n\n".join(m["content"] for m in body["messages"] if m["role"] == "system")
        turns = tuple(llm.Message(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system")
        if not turns:
            raise InvalidArgs("llm.complete: give at least one user or assistant message")
        try:
            got = drv.complete(llm.ChatRequest(system, turns, (), body["max_tokens"], body.get("temperature"),
                                               deadline=time.monotonic() + wait),
                               on_text=lambda delta: budget.take(len(delta.encode())))
        except llm.ProviderError as exc:
            if exc.status in (401, 403):
                raise Internal("llm.complete: the endpoint refused the deployer's key (HTTP "
                               f"{exc.status})") from None
            if exc.status == 429:
                raise refuse(CapabilityDenied, "rate-limited",
                             "llm.complete: the endpoint is rate-limiting (HTTP 429)") from None
            raise Internal(f"llm.complete: {drv.settings.redact(exc.message)}") from None
        u = got.usage
        return {"text": got.text, "model": got.model, "finish_reason": got.stop_reason,
                "usage": {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
                          "total_tokens": u.input_tokens + u.output_tokens, "cost_usd": u.cost_usd}}

    def _post(self, body: dict[str, Any], wait: float, budget: ByteBudget) -> dict[str, Any]:
        import httpx

        if wait <= 0:
            raise refuse(Timeout, "deadline", "llm.complete: no time left before the deadline")
        deadline = time.monotonic() + wait
        # raw bytes are what the budget counts: no decompression bomb
        headers = {"Accept-Encoding": "identity"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            with _fetch.client(timeout=wait) as client, _deadline.cut_at(deadline) as cut, \
                    client.stream("POST", self.base_url + "/chat/completions", json=body,
                                  headers=headers, extensions=cut.extensions) as resp:
                data = bytearray()
                for chunk in resp.iter_raw():
                    budget.take(len(chunk))  # before the chunk is kept
                    if cut.fired:
                        break
                    data += chunk
                if cut.fired:  # the deadline ended the body early: never a short answer
                    raise refuse(Timeout, "deadline",
                                 "llm.complete: endpoint still answering at the deadline")
                status = resp.status_code
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException) or cut.fired:
                raise refuse(Timeout, "deadline",
                             "llm.complete: the endpoint did not answer in time") from None
            raise Internal(f"llm.complete: endpoint unreachable ({type(exc).__name__})") from None
        if status in (401, 403):
            raise Internal(f"llm.complete: the endpoint refused the deployer's key (HTTP {status})")
        if status == 429:
            raise refuse(CapabilityDenied, "rate-limited",
                         "llm.complete: the endpoint is rate-limiting (HTTP 429)")
        if status >= 400:
            raise Internal(f"llm.complete: endpoint answered HTTP {status}")
        import json

        try:
            doc = json.loads(bytes(data))
            choice = doc["choices"][0]
            text = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise Internal("llm.complete: the endpoint's answer is not an OpenAI-style chat "
                           "completion") from None
        return {"text": text or "", "model": doc.get("model", body["model"]),
                "finish_reason": choice.get("finish_reason"), "usage": doc.get("usage") or {}}
