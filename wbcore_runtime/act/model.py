"""The ACT tool-provider model (seed 002) as Python types.

A *tool definition* names a tool, describes it, gives its input as a JSON Schema and
carries annotations (``std:read-only`` ...). A *tool call* names a tool and carries its
arguments as CBOR bytes plus metadata (``std:traceparent`` ...). A call answers with a
*stream* of events: content parts, metadata, and at most one terminal error.

Metadata values are CBOR on the wire (``list<tuple<string, list<u8>>>``); here they are
kept decoded (``dict[str, Any]``) and encoded only at the edges (:mod:`wbcore_runtime.act.cbor`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Union

from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.act.cbor import loads

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
            import json

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
