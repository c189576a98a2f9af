"""The LLM provider contract: chat records, settings, retries and cost, for every provider.

A provider is a plugin (``wbcore_llm_providers`` yields :class:`wbcore_runtime.contract.records.LlmProvider`)
whose factory returns an :class:`LlmDriver` bound to one :class:`LlmSettings`. The agent loop (and any
other surface) speaks only these records: provider-neutral messages with native tool calls, a
:class:`ChatResponse` with token usage and cost. Each provider speaks its vendor's wire format on its SDK.

Settings come from the environment of the runtime (the deployer's): ``WB_LLM_PROVIDER``, ``WB_LLM_MODEL``,
``WB_LLM_BASE_URL``, ``WB_LLM_API_KEY`` (held by the host: never in a repr, a step, an event or an error),
``WB_LLM_RETRIES`` (default 3), ``WB_LLM_BACKOFF`` (first wait in seconds, default 0.5, doubling, capped
at 8), ``WB_LLM_TIMEOUT`` (seconds per request, default 120), ``WB_LLM_MAX_TOKENS`` (default 4096) and
``WB_LLM_PRICES`` (``model=IN/OUT;…`` in USD per million tokens: cost is reported only for priced models).
A model may be written ``provider:model`` (``anthropic:claude-sonnet-4-5``); the prefix counts only when
it names an installed provider, so ``llama3:8b`` stays a model name.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from wbcore_runtime.contract import jsonbound, lazy
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError, unknown_name

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.guard import fetch
else:
    fetch = lazy.module("wbcore_runtime.guard.fetch")

DEFAULT_RETRIES = 3
MAX_RETRIES = 10
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_TOKENS = 4096
#: HTTP statuses a provider retries (rate limits and server faults); others surface at once.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool offered to the model: a name matching ``^[A-Za-z0-9_-]{1,64}$`` (both
    vendors' rule), a description and a JSON Schema for its arguments."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call the model asked for (``id`` pairs it with its result)."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class Message:
    """One turn: ``user`` (text), ``assistant`` (text and/or tool calls) or ``tool`` (the
    result of the call ``tool_call_id``; ``is_error`` marks a failed call)."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolUse, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.tool_calls:
            out["tool_calls"] = [t.as_dict() for t in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.is_error:
            out["is_error"] = True
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        calls = tuple(ToolUse(c["id"], c["name"], dict(c.get("arguments") or {}))
                      for c in d.get("tool_calls") or ())
        return cls(d["role"], d.get("text", ""), calls, d.get("tool_call_id"), bool(d.get("is_error", False)))


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    #: USD, ``None`` when the model has no price in ``WB_LLM_PRICES``.
    cost_usd: float | None = None
    #: The counts are :func:`estimate_usage`'s (the endpoint reported none), not the server's.
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        cost = (None if self.cost_usd is None and other.cost_usd is None
                else (self.cost_usd or 0.0) + (other.cost_usd or 0.0))
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens, cost,
                     self.estimated or other.estimated)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                               "cost_usd": self.cost_usd}
        if self.estimated:  # only when true: records of reported usage keep their shape
            out["estimated"] = True
        return out


#: Characters per token assumed by :func:`estimate_usage` (English text and JSON with
#: common BPE vocabularies run 3.5–4.5).
CHARS_PER_TOKEN = 4


def estimate_usage(request: ChatRequest, text: str, tool_calls: Sequence[ToolUse] = ()) -> Usage:
    """Token counts guessed from characters (``CHARS_PER_TOKEN``), marked ``estimated``:
    what a provider reports when the endpoint's answer carried no usage (a streaming
    server that ignores ``stream_options.include_usage``). Input: the system prompt, every
    message and every tool's name, description and schema; output: the text and calls."""
    chars = len(request.system) + sum(len(m.text) + len(json.dumps([c.as_dict() for c in m.tool_calls]))
                                      for m in request.messages)
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(dict(t.input_schema)))
                 for t in request.tools)
    out = len(text) + sum(len(c.name) + len(json.dumps(dict(c.arguments))) for c in tool_calls)
    return Usage(-(-chars // CHARS_PER_TOKEN), -(-out // CHARS_PER_TOKEN), None, True)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    #: A ``time.monotonic()`` instant the answer (retries included) must not pass: each
    #: request waits at most until then, and no retry starts that could not end before it.
    deadline: float | None = None
    #: Which tool the model may or must call: ``None`` (the endpoint's default), ``auto``,
    #: ``required`` (some tool), ``none``, or a tool's name (that tool). See :func:`check_tool_choice`.
    tool_choice: str | None = None

    def timeout(self, default: float) -> float:
        """Seconds one request may wait now: ``default``, shortened by the deadline."""
        if self.deadline is None:
            return default
        return max(0.05, min(default, self.deadline - time.monotonic()))


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str
    tool_calls: tuple[ToolUse, ...]
    stop_reason: str
    usage: Usage
    model: str
    #: Requests made for this answer (1 + the retries that were needed).
    attempts: int = 1

    def message(self) -> Message:
        return Message("assistant", self.text, self.tool_calls)


#: Keys shorter than this are redacted only as whole tokens (:meth:`LlmSettings.redact`).
SHORT_KEY = 8


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """Which endpoint and model a driver talks to. Neither the key nor the base URL is in a repr."""

    provider: str
    model: str
    base_url: str | None = field(default=None, repr=False)  # its user-info: basic auth to httpx
    api_key: str | None = field(default=None, repr=False)
    max_retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_tokens: int = DEFAULT_MAX_TOKENS
    #: model → (USD per million input tokens, per million output tokens)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.prices.get(model) or self.prices.get(self.model)
        if price is None:
            return None
        return round((input_tokens * price[0] + output_tokens * price[1]) / 1_000_000, 8)

    def redact(self, text: str) -> str:
        """``text`` with the key replaced: what any error or log line carries.

        A key shorter than :data:`SHORT_KEY` characters (a local server takes any key, and
        people type ``x``) is replaced only where it stands as a whole token: replacing every
        occurrence of a one-letter key would garble every result, and such a key guards nothing
        a substring could leak."""
        key = self.api_key
        if not key:
            return text
        if len(key) >= SHORT_KEY:
            return text.replace(key, "[redacted]")
        import re

        return re.sub(rf"(?<![A-Za-z0-9_\-]){re.escape(key)}(?![A-Za-z0-9_\-])", "[redacted]", text)


class LlmDriver(Protocol):
    """What a provider's factory returns: one model endpoint, bound to its settings."""

    settings: LlmSettings

    def complete(self, request: ChatRequest, *, on_text: Callable[[str], None] | None = None) -> ChatResponse:
        """One answer, streamed (``on_text`` gets each text delta), retried per
        :func:`with_retries`; raises :class:`ProviderError` once retries are spent."""
        ...


class ProviderError(WbError):
    """The model endpoint failed. ``retryable``: a rate limit, a server fault or a lost
    connection (retried with backoff); ``status``: the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retryable, self.retry_after = status, retryable, retry_after


#: How much of an endpoint's error text reaches a message (after redaction).
MAX_ERROR_TEXT = 300


def provider_error(vendor: str, exc: Exception, settings: Any, *, status_error: type,
                   connection_error: type) -> ProviderError:
    """The one mapping of a vendor SDK's exception to :class:`ProviderError`: ``status_error``
    (has ``status_code``, ``response.headers``, ``message``) by HTTP status — retryable per
    :data:`RETRYABLE_STATUS`, ``Retry-After`` honoured, a refused key never quoted —,
    ``connection_error`` as retryable, anything else as itself; every text redacted."""
    redact = settings.redact
    if isinstance(exc, status_error):
        status = exc.status_code  # type: ignore[attr-defined]
        try:
            retry_after: float | None = float(exc.response.headers.get("retry-after", ""))  # type: ignore[attr-defined]
        except (ValueError, AttributeError):
            retry_after = None
        text = redact(str(getattr(exc, "message", "") or exc))[:MAX_ERROR_TEXT]
        if status in (401, 403):
            text = "the endpoint refused the deployer's key"
        elif 300 <= status < 400:  # never followed (SdkChat)
            text = (f"a redirect to {fetch.redact_target(exc.response.headers.get('location', ''))}, "  # type: ignore[attr-defined]
                    "not followed; set the base URL to the endpoint itself")
        return ProviderError(f"{vendor}: HTTP {status}: {text}", status=status,
                             retryable=status in RETRYABLE_STATUS, retry_after=retry_after)
    if isinstance(exc, connection_error):  # timeouts included
        return ProviderError(f"{vendor}: endpoint unreachable or silent ({type(exc).__name__})",
                             retryable=True)
    return ProviderError(f"{vendor}: {type(exc).__name__}: {redact(str(exc))[:MAX_ERROR_TEXT]}")


def sdk_availability(module: str) -> Availability:
    """An SDK provider's ``LlmProvider.available``: whether its vendor SDK (``module``, also
    its pip name) can be imported here, found without importing it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return Availability.no(f"the {module} SDK is not installed (pip install {module})")
    return Availability.yes()


class SdkChat:
    """The shell every provider on a vendor's official SDK shares (``wbcore-llm-openai``,
    ``wbcore-llm-anthropic``): the SDK's client made once, with its own retries off (every
    provider retries through :func:`with_retries`, the one policy), proxy settings from the
    environment ignored and no redirect followed (the deployer's endpoint is reached directly;
    the key, x-api-key too, goes nowhere else); the key never shown (``repr`` names the endpoint
    and model); errors mapped by :func:`provider_error`. A provider subclass sets :attr:`vendor`,
    passes its SDK module, client class and extra client arguments, and writes one attempt."""

    #: The vendor's name in every error ("openai: HTTP 429: …").
    vendor = ""
    #: What a right endpoint is, for the error a wrong one gets ("a chat-completions endpoint").
    endpoint_kind = ""
    #: The most of a non-streamed body read (a chat answer is far smaller).
    max_body = 64 << 20

    def __init__(self, settings: LlmSettings, sdk: Any, client_class: Any, *, endpoint: str | None = None,
                 **client_kw: Any) -> None:
        self.settings = settings
        self._sdk = sdk
        self._endpoint = endpoint or settings.base_url or "default endpoint"
        # the transport is of the SDK's own httpx package (httpx, or a fork such as httpx2)
        client = next(c for c in sdk.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
        http = importlib.import_module(client.__module__.partition(".")[0])
        self._client = client_class(
            api_key=settings.api_key or "not-needed",  # local servers take any key; the SDK wants one
            max_retries=0, timeout=settings.timeout_s,
            http_client=sdk.DefaultHttpxClient(trust_env=False, follow_redirects=False,
                                               timeout=settings.timeout_s, transport=(
                fetch.bounded_transport(max_bytes=self.max_body, what=self.vendor, http=http))), **client_kw)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self._endpoint}, model={self.settings.model!r})"

    def close(self) -> None:
        self._client.close()

    def complete(self, request: ChatRequest, *, on_text: Callable[[str], None] | None = None) -> ChatResponse:
        return with_retries(lambda: self._once(request, on_text), self.settings, deadline=request.deadline)

    def _error(self, exc: Exception) -> ProviderError:
        return provider_error(self.vendor, exc, self.settings, status_error=self._sdk.APIStatusError,
                              connection_error=self._sdk.APIConnectionError)

    def _client_for(self, request: ChatRequest) -> Any:
        """The client for one attempt: the request's deadline, when it has one, bounds it."""
        if request.deadline is None:
            return self._client
        return self._client.with_options(timeout=request.timeout(self.settings.timeout_s))

    def _whole_body(self, content_type: str, raw: bytes) -> Any:
        """The one JSON body of a server that answered a streamed request without streaming
        (some local servers do), parsed; any other content type, or too large a body, is a
        named error that says which endpoint was expected."""
        ct = content_type.split(";")[0].strip().lower()
        if (ct != "application/json" and not ct.endswith("+json")) or len(raw) > self.max_body:
            raise ProviderError(
                f"{self.vendor}: the server answered a streamed request with "
                f"{content_type or 'no content type'} "
                f"({len(raw)} bytes), neither server-sent events nor JSON: is WB_LLM_BASE_URL a "
                f"{self.endpoint_kind}?")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProviderError(f"{self.vendor}: the server's JSON body does not parse ({exc})",
                                retryable=True) from None

    def _once(self, request: ChatRequest, on_text: Callable[[str], None] | None) -> ChatResponse:
        """One attempt (no retry): the provider's wire format on its SDK."""
        raise NotImplementedError(f"{type(self).__name__} does not define _once")


def _prices(raw: str) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for part in (p.strip() for p in raw.split(";")):
        if not part:
            continue
        model, _, pair = part.rpartition("=")
        try:
            a, _, b = pair.partition("/")
            out[model.strip()] = (float(a), float(b))
        except ValueError:
            raise InvalidArgs(f"WB_LLM_PRICES: {part!r} is not MODEL=IN/OUT "
                              "(USD per million tokens)") from None
    return out


def _number(env: Mapping[str, str], key: str, default: float, lo: float, hi: float) -> float:
    raw = env.get(key, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgs(f"{key}={raw!r}: expected a number between {lo:g} and {hi:g}") from None
    if not lo <= value <= hi:
        raise InvalidArgs(f"{key}={raw!r}: expected a number between {lo:g} and {hi:g}")
    return value


def split_model(spec: str | None, providers: Sequence[str]) -> tuple[str | None, str | None]:
    """``"anthropic:claude-x"`` → ``("anthropic", "claude-x")`` when ``anthropic`` is a
    provider; anything else is a bare model name."""
    if not spec:
        return None, None
    head, sep, rest = spec.partition(":")
    if sep and head in providers and rest:
        return head, rest
    return None, spec


def settings(runtime: RuntimeServices, *, model: str | None = None,
             agent_model: str | None = None) -> LlmSettings:
    """The settings for one run: the model from ``model`` (``--model``), else the agent
    definition's ``:MODEL:``, else ``WB_LLM_MODEL``; the provider from that spec's
    ``provider:`` prefix, else ``WB_LLM_PROVIDER``, else the only installed provider."""
    env = runtime.env
    names = runtime.llm_providers.names()
    provider, chosen = None, None
    for spec in (model, agent_model, env.get("WB_LLM_MODEL")):
        provider, chosen = split_model(spec, names)
        if chosen:
            break
    provider = provider or env.get("WB_LLM_PROVIDER") or (names[0] if len(names) == 1 else None)
    if provider is None:
        if not names:
            raise NotFound("no LLM provider is installed; "
                           "pip install wbcore-llm-openai or wbcore-llm-anthropic")
        raise InvalidArgs("several LLM providers are installed; choose one with WB_LLM_PROVIDER "
                          f"or a model written provider:model (installed: {', '.join(names)})")
    if provider not in names:
        raise NotFound(unknown_name("LLM provider", provider, names))
    if not chosen:
        raise InvalidArgs("no model chosen: pass --model, set :MODEL: in the agent definition, "
                          "or set WB_LLM_MODEL")
    return LlmSettings(
        provider=provider, model=chosen, base_url=env.get("WB_LLM_BASE_URL") or None,
        api_key=env.get("WB_LLM_API_KEY") or None,
        max_retries=int(_number(env, "WB_LLM_RETRIES", DEFAULT_RETRIES, 0, MAX_RETRIES)),
        backoff_s=_number(env, "WB_LLM_BACKOFF", DEFAULT_BACKOFF_S, 0, MAX_BACKOFF_S),
        timeout_s=_number(env, "WB_LLM_TIMEOUT", DEFAULT_TIMEOUT_S, 1, 3600),
        max_tokens=int(_number(env, "WB_LLM_MAX_TOKENS", DEFAULT_MAX_TOKENS, 1, 1 << 20)),
        prices=_prices(env.get("WB_LLM_PRICES", "")),
    )


def driver(runtime: RuntimeServices, llm_settings: LlmSettings) -> LlmDriver:
    """The driver of the chosen provider, or the reason it cannot run here."""
    record = runtime.llm_providers.get(llm_settings.provider)  # a contract.records.LlmProvider
    avail = record.available()
    if not avail.ok:
        raise NotFound(f"LLM provider {record.name} is not available: {avail.reason}")
    found: LlmDriver = record.factory(runtime, llm_settings)
    return found


def with_retries(attempt: Callable[[], ChatResponse], llm_settings: LlmSettings, *,
                 sleep: Callable[[float], None] = time.sleep, deadline: float | None = None) -> ChatResponse:
    """THE retry policy of every provider: a retryable :class:`ProviderError` is retried up
    to ``max_retries`` times, waiting ``backoff_s · 2^n`` (capped at 8 s, or the server's
    ``retry-after`` when it is shorter than 8 s); the last error surfaces with the count.
    With a ``deadline`` (``time.monotonic()``), no wait runs past it: the error surfaces.
    An empty answer (no text, no tool call) is a retryable error (:func:`check_answer`):
    never an empty success."""
    tries = llm_settings.max_retries + 1
    for n in range(tries):
        try:
            got = check_answer(attempt(), llm_settings.provider)
            return replace(got, attempts=n + 1)
        except ProviderError as exc:
            if not exc.retryable or n == tries - 1:
                if n:
                    exc.args = (f"{exc.message} (after {n + 1} attempts)",)
                raise
            wait = min(MAX_BACKOFF_S, llm_settings.backoff_s * (2 ** n))
            if exc.retry_after is not None and 0 <= exc.retry_after <= MAX_BACKOFF_S:
                wait = max(wait, exc.retry_after)
            if deadline is not None and time.monotonic() + wait >= deadline:
                exc.args = (f"{exc.message} (after {n + 1} attempts; no time left to retry)",)
                raise
            sleep(wait)
    raise AssertionError("unreachable")


def check_answer(got: ChatResponse, vendor: str) -> ChatResponse:
    """``got``, or a retryable :class:`ProviderError` naming why it is no answer: neither
    text nor a tool call (a server that sent an empty stream, or a body the provider could
    not read), or a tool call without a name."""
    if not got.text.strip() and not got.tool_calls:
        raise ProviderError(f"{vendor}: the model's answer was empty (no text and no tool call; stop reason "
                            f"{got.stop_reason or 'none'!r}): the server sent nothing usable", retryable=True)
    nameless = [c.id for c in got.tool_calls if not c.name]
    if nameless:
        raise ProviderError(f"{vendor}: malformed answer: tool call(s) {', '.join(nameless[:5])} "
                            "have no name", retryable=True)
    return got


TOOL_CHOICE_WORDS = ("auto", "required", "none")


def check_tool_choice(choice: str | None, tools: Sequence[ToolSpec]) -> str | None:
    """``choice`` when it is a word of :data:`TOOL_CHOICE_WORDS` or the name of an offered
    tool; anything else is an :class:`InvalidArgs` naming what may be chosen."""
    if choice is None or choice in TOOL_CHOICE_WORDS:
        return choice
    names = [t.name for t in tools]
    if choice not in names:
        raise InvalidArgs(f"tool_choice {choice!r} is neither {', '.join(TOOL_CHOICE_WORDS)} "
                          f"nor an offered tool (offered: {', '.join(names) or 'none'})")
    return choice


def parse_arguments(raw: str | Mapping[str, Any] | None, tool: str) -> dict[str, Any]:
    """A tool call's arguments as a map: JSON text (OpenAI) or an object (Anthropic).
    Malformed text becomes ``{"_invalid_json": text}`` so the loop can tell the model."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = jsonbound.loads(raw, what=f"the arguments of {tool}")  # too deep is malformed too
    except ValueError:
        return {"_invalid_json": raw[:2000]}
    return value if isinstance(value, dict) else {"_invalid_json": raw[:2000]}
