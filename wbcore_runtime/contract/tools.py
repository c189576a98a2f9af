"""The tools contract: the ACT tool-provider model (seed 002) as Python types, and the
tool provider every tool surface (MCP, ``wbx call``, the agent loop) asks its runtime for.

The core serves no tools itself. A plugin serves a :class:`ToolService` through
``wbcore_tool_providers`` (``wbcore-act``); a surface takes it with :func:`service` and
speaks only the records below::

    tools = service(runtime)                          # NotFound naming what to install
    provider = tools.provider(principal=p, only=["acme"])
    outcome = provider.call_json("acme.greet", {"args": ["you"]})   # a CallOutcome

A *tool definition* names a tool, describes it, gives its input as a JSON Schema and
carries annotations (``std:read-only`` ...). A *tool call* names a tool and carries its
arguments as CBOR bytes plus metadata (``std:traceparent`` ...). A call answers with a
*stream* of events: content parts, metadata, and at most one terminal error.

Metadata values are CBOR on the wire (``list<tuple<string, list<u8>>>``); here they are
kept decoded (``dict[str, Any]``) and encoded only at the edges (:mod:`wbcore_runtime.contract.cbor`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, Union

from wbcore_runtime.contract.cbor import loads
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError, unknown_name
from wbcore_runtime.contract.host import Choice

if TYPE_CHECKING:
    from wbcore_runtime.contract.calls import Principal

#: What to say when no plugin serves a tool provider.
NONE_INSTALLED = "no tool provider is installed (toolkits as ACT tools); pip install wbcore-act"
#: Picks one of several installed tool providers by name.
ENV_CHOICE = "WB_TOOL_PROVIDER"

# --- the std: keys (ACT-CONSTANTS) ---------------------------------------------------

STD_SKILL = "std:skill"  # component-info: agent instructions (markdown)
STD_FORWARD = "std:forward"  # tool-call metadata: bridge forwarding blob
STD_API_KEY = "std:api-key"  # metadata: API key for remote services
STD_BEARER_TOKEN = "std:bearer-token"  # metadata: bearer auth token
STD_READ_ONLY = "std:read-only"  # tool annotation: does not modify state
STD_DESTRUCTIVE = "std:destructive"  # tool annotation: may destroy data
STD_IDEMPOTENT = "std:idempotent"  # tool annotation: safe to retry
STD_TRACEPARENT = "std:traceparent"  # metadata: W3C Trace Context
STD_REQUEST_ID = "std:request-id"  # metadata: correlation id
STD_TIMEOUT_MS = "std:timeout-ms"  # tool annotation: suggested timeout
STD_TAGS = "std:tags"  # tool annotation: list of tags
STD_USAGE_HINTS = "std:usage-hints"
STD_ANTI_USAGE_HINTS = "std:anti-usage-hints"
STD_EXAMPLES = "std:examples"
STD_PROGRESS_TOKEN = "std:progress-token"  # metadata: where progress is reported
STD_DESCRIPTION = "std:description"
STD_CAPABILITIES = "std:capabilities"
STD_DEFAULT_LANGUAGE = "std:default-language"

#: Keys whose values are secrets: never echoed into reprs, logs or errors.
SECRET_KEYS = frozenset({STD_API_KEY, STD_BEARER_TOKEN})

class Metadata(Mapping[str, Any]):
    """Read-only, decoded metadata whose repr hides secret values."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        self._data = MappingProxyType(dict(data))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data)))

    def __repr__(self) -> str:
        shown = {k: ("***" if k in SECRET_KEYS else v) for k, v in self._data.items()}
        return f"Metadata({shown!r})"


# --- localized strings -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalizedString:
    """``plain(text)`` or ``localized([(lang, text), ...])``."""

    plain: str | None = None
    localized: tuple[tuple[str, str], ...] = ()

    def text(self, lang: str = "en") -> str:
        """Resolve to one string: exact tag, prefix, ``en``, then the first entry."""
        if self.plain is not None:
            return self.plain
        for tag, text in self.localized:
            if tag == lang:
                return text
        for tag, text in self.localized:
            if tag.split("-")[0] == lang.split("-")[0]:
                return text
        for tag, text in self.localized:
            if tag == "en":
                return text
        return self.localized[0][1] if self.localized else ""

    def to_cbor_value(self) -> str | dict[str, str]:
        """The CBOR form: a text string for plain, a map for localized."""
        return self.plain if self.plain is not None else dict(self.localized)


# --- error kinds -----------------------------------------------------------------------


class ToolErrorKind(str, Enum):
    NOT_FOUND = "not-found"
    INVALID_ARGS = "invalid-args"
    TIMEOUT = "timeout"
    CAPABILITY_DENIED = "capability-denied"
    INTERNAL = "internal"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ToolError:
    """A terminal error. ``other`` names a kind outside the well-known five."""

    kind: ToolErrorKind
    message: LocalizedString | None = None
    other: str | None = None
    extensions: Metadata = field(default_factory=Metadata)

    def __post_init__(self) -> None:
        if self.kind is ToolErrorKind.OTHER and not self.other:
            raise ValueError("error-kind other(...) needs its name")

    @property
    def text(self) -> str:
        return self.message.text() if self.message else ""

    @property
    def kind_name(self) -> str:
        return self.other if self.kind is ToolErrorKind.OTHER and self.other else self.kind.value

    @classmethod
    def from_wb(cls, exc: WbError) -> ToolError:
        return cls(ToolErrorKind(exc.kind.value), LocalizedString(plain=exc.message))


# --- tools, calls, events --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: LocalizedString | None = None
    input_schema: Mapping[str, Any] | None = None
    annotations: Metadata = field(default_factory=Metadata)
    extensions: Metadata = field(default_factory=Metadata)

    @property
    def read_only(self) -> bool:
        return bool(self.annotations.get(STD_READ_ONLY, False))

    @property
    def destructive(self) -> bool:
        return bool(self.annotations.get(STD_DESTRUCTIVE, False))

    @property
    def idempotent(self) -> bool:
        return bool(self.annotations.get(STD_IDEMPOTENT, False))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call: ``arguments`` are CBOR bytes (RFC 8949), or ``None`` for no arguments."""

    name: str
    arguments: bytes | None = None
    metadata: Metadata = field(default_factory=Metadata)
    extensions: Metadata = field(default_factory=Metadata)

    def args(self) -> Any:
        """The decoded arguments (``{}`` when absent)."""
        return {} if self.arguments is None else loads(self.arguments)

    def args_map(self) -> dict[str, Any]:
        """The decoded arguments a tool takes: a map, anything else ``InvalidArgs``."""
        args = self.args()
        if not isinstance(args, dict):
            raise InvalidArgs(f"{self.name}: arguments must be a map (JSON object), got "
                              f"{type(args).__name__}")
        return args

    def deadline(self, timeout: float | None) -> float | None:
        """``timeout`` (seconds), shortened when the call's ``std:timeout-ms`` asks for less."""
        ms = self.metadata.get(STD_TIMEOUT_MS)
        if isinstance(ms, int) and ms > 0:
            return ms / 1000.0 if timeout is None else min(timeout, ms / 1000.0)
        return timeout


@dataclass(frozen=True, slots=True)
class ContentPart:
    """``data`` is UTF-8 for ``text/*``, CBOR for ``application/cbor``, else opaque bytes."""

    data: bytes | None = None
    mime_type: str | None = None
    annotations: Metadata = field(default_factory=Metadata)
    extensions: Metadata = field(default_factory=Metadata)

    def value(self) -> Any:
        """Decode by MIME type: str for text, a value for CBOR/JSON, bytes otherwise."""
        data = self.data or b""
        mt = (self.mime_type or "").split(";")[0].strip().lower()
        if mt.startswith("text/"):
            return data.decode("utf-8", errors="replace")
        if mt == "application/cbor":
            return loads(data)
        if mt == "application/json":
            return json.loads(data)
        return data


@dataclass(frozen=True, slots=True)
class Content:
    part: ContentPart


@dataclass(frozen=True, slots=True)
class Error:
    error: ToolError


@dataclass(frozen=True, slots=True)
class MetadataEvent:
    metadata: Metadata


StreamEvent = Union[Content, Error, MetadataEvent]


@dataclass(frozen=True, slots=True)
class ComponentInfo:
    """A component's ACT info (the ``act:component`` / ``act:skill`` sections, or 0.1 ``get-info``)."""

    name: str | None
    version: str | None
    description: LocalizedString | None = None
    default_language: str | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    skill: str | None = None
    revision: str = "0.4"
    extra: Mapping[str, Any] = field(default_factory=dict)


# --- what a surface gets from the provider ---------------------------------------------


@dataclass(frozen=True, slots=True)
class DeclaredArg:
    """One argument a skill declares for its command (``#+ARG: <name>[:<type>][!] <description>``)."""

    name: str
    type: str
    required: bool
    description: str


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool definition and what it runs: ``kind`` command | kernel | component."""

    definition: ToolDefinition
    kind: str
    target: str  # the registry name (command / kernel / component)
    toolkit: str | None
    function: str | None = None  # component function
    declared: tuple[DeclaredArg, ...] = ()
    caps: frozenset[str] = frozenset()
    skills: tuple[str, ...] = ()
    output_schema: Mapping[str, Any] | None = None
    act_tool: str | None = None  # the tool's name inside an ACT tool-provider component

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def description(self) -> str:
        return self.definition.description.text() if self.definition.description else ""


@dataclass(slots=True)
class CallOutcome:
    """The events of one call plus what a surface needs beside them."""

    events: list[StreamEvent]
    structured: Any = None  # a JSON value (component results) for structured output
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> ToolError | None:
        return next((e.error for e in self.events if isinstance(e, Error)), None)

    def text(self) -> str:
        return events_text(self.events)


def events_text(events: Iterable[StreamEvent]) -> str:
    """All text content of a stream, joined (what a plain-text surface shows)."""
    out: list[str] = []
    for ev in events:
        if isinstance(ev, Content):
            v = ev.part.value()
            out.append(v if isinstance(v, str) else json.dumps(v, default=repr) if not isinstance(v, bytes)
                       else v.decode("utf-8", "replace"))
    return "".join(out)


#: ``progress(fraction, message)``: how a call reports how far it got.
Progress = Callable[[float, str], None]


class ToolTable:
    """A provider's tools by name, built on first use and again after :meth:`refresh_if_changed`
    forgot them; the one lookup rule every provider keeps (an unknown name is looked up once
    more after a refresh, since a toolkit may have been built meanwhile, then ``NotFound``
    naming the known). A subclass builds the table (``_build``) and says when it is stale."""

    _tools: dict[str, Tool] | None = None
    _lock: threading.Lock

    def _build(self) -> dict[str, Tool]:
        raise NotImplementedError

    def refresh_if_changed(self) -> bool:
        raise NotImplementedError

    def _forget(self) -> None:
        with self._lock:
            self._tools = None

    def tools(self) -> dict[str, Tool]:
        if self._tools is None:
            with self._lock:
                if self._tools is None:
                    self._tools = self._build()
        return self._tools

    def list_tools(self) -> list[ToolDefinition]:
        return [t.definition for t in self.tools().values()]

    def tool(self, name: str) -> Tool:
        found = self.tools().get(name)
        if found is None and self.refresh_if_changed():
            found = self.tools().get(name)
        if found is None:
            raise NotFound(unknown_name("tool", name, list(self.tools())))
        return found


class ToolProvider(Protocol):
    """Every registered toolkit as ACT tools, seen by one principal (``only``: tool names or
    toolkit ids to expose, ``None`` for all): one tool per command, kernel and component
    function, and one call path."""

    only: frozenset[str] | None

    def tools(self) -> dict[str, Tool]:
        """The tools by name, built once and kept until :meth:`refresh_if_changed` sees the
        registry change."""
        ...

    def list_tools(self) -> list[ToolDefinition]: ...

    def tool(self, name: str) -> Tool:
        """One tool; ``NotFound`` naming the known ones."""
        ...

    def refresh_if_changed(self) -> bool:
        """Forget the tool list when the registry changed (a toolkit was built or removed);
        returns whether it did."""
        ...

    def selected(self, tool: Tool) -> bool:
        """Whether ``only`` lets ``tool`` be served."""
        ...

    def act_skills(self) -> dict[str, str]:
        """``act:skill`` texts carried by component artifacts, by toolkit (or component) name."""
        ...

    def call_tool(self, call: ToolCall, *, cancel: threading.Event | None = None,
                  timeout: float | None = None, progress: Progress | None = None) -> CallOutcome:
        """Run one ACT call; every expected failure is an error event (an unknown tool is ``NotFound``)."""
        ...

    def call_json(self, name: str, args: Mapping[str, Any], *, cancel: threading.Event | None = None,
                  timeout: float | None = None, progress: Progress | None = None,
                  mounts: Sequence[str] = (), remote: str | None = None) -> CallOutcome:
        """Run one tool with JSON arguments (what MCP sends); ``mounts`` are host folders for a
        command, asked for by ``remote`` (the core's ``dispatch.mounts.grant`` decides)."""
        ...


class ToolService(Protocol):
    """What ``ToolProviderService.factory(runtime)`` returns: providers over that runtime, and
    the rules a surface needs to describe and run a command it serves itself (a toolkit not
    built yet, an agent's session toolkit) exactly as the provider would."""

    def provider(self, *, principal: Principal | None = None,
                 only: Iterable[str] | None = None) -> ToolProvider: ...

    def draft(self, kind: str, target: str, toolkit: Any, caps: frozenset[str],
              timeout_s: float | None) -> Tool:
        """The ``command`` or ``kernel`` tool ``<toolkit>.<target>`` a loaded toolkit will serve
        once built (its skill declares the schema), granted at most ``caps``."""
        ...

    def annotations(self, caps: frozenset[str], flags: frozenset[str], timeout_s: float | None) -> Metadata:
        """A tool's ``std:`` annotations from its caps, its skill's ``#+FLAGS:`` and its timeout."""
        ...

    def command_schema(self, skill_text: str) -> dict[str, Any]:
        """The JSON Schema of a command whose skill is ``skill_text`` (its ``#+ARG:`` lines)."""
        ...

    def command_argv(self, name: str, skill_text: str, args: Mapping[str, Any]) -> tuple[list[str], bytes]:
        """A command's JSON arguments (:meth:`command_schema`) as ``(argv, stdin)``; bad ones are
        ``InvalidArgs``."""
        ...


#: ``service(runtime, name)``: the tool service to use (``contract.host.Choice``).
service: Choice[ToolService] = Choice(lambda r: r.tool_providers, ENV_CHOICE,
                                      ("tool provider", "tool providers"), NONE_INSTALLED)
