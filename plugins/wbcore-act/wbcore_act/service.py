"""The tool service wbcore-act serves through ``wbcore_tool_providers``
(``wbcore_runtime.contract.tools.ToolService``): providers over one runtime, and the skill
rules a surface uses to describe and run a command it serves itself (MCP's toolkits not
built yet, an agent's session toolkits) exactly as a provider would."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.tools import LocalizedString, Metadata, Tool, ToolDefinition

from wbcore_act import provider as _provider

if TYPE_CHECKING:
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.contract.host import RuntimeServices


class ActToolService:
    """Every registered toolkit as ACT tools (:class:`~wbcore_act.provider.ToolkitProvider`)."""

    def __init__(self, runtime: RuntimeServices) -> None:
        self.runtime = runtime

    def provider(self, *, principal: Principal | None = None,
                 only: Iterable[str] | None = None) -> _provider.ToolkitProvider:
        return _provider.ToolkitProvider(self.runtime, principal=principal, only=only)

    def draft(self, kind: str, target: str, toolkit: Any, caps: frozenset[str],
              timeout_s: float | None) -> Tool:
        text = _provider._skill_text(self.runtime, toolkit, target)
        tagline = toolkit.manifest.tagline or toolkit.id
        name = f"{toolkit.id}.{target}"
        lead = _provider._lead(toolkit, target, tagline)
        if kind == "command":
            declared = _provider.declared_args(text)
            desc = f"{lead} (runs the sandboxed command `{target}`: argv + stdin → stdout)"
            schema = _provider.command_schema(declared)
        elif kind == "kernel":
            declared = ()
            desc = f"{lead} (kernel `{target}`: bytes in → bytes out)"
            schema = dict(_provider.KERNEL_SCHEMA)
        else:
            raise ValueError(f"a drafted tool is a command or a kernel, not {kind!r}")
        td = ToolDefinition(name, LocalizedString(plain=desc), schema,
                            _provider._annotations(caps, _provider.skill_flags(text), timeout_s))
        return Tool(td, kind, target, toolkit.id, declared=declared, caps=caps,
                    skills=tuple(s.slug for s in toolkit.skills))

    def annotations(self, caps: frozenset[str], flags: frozenset[str], timeout_s: float | None) -> Metadata:
        return _provider._annotations(caps, flags, timeout_s)

    def command_schema(self, skill_text: str) -> dict[str, Any]:
        return _provider.command_schema(_provider.declared_args(skill_text))

    def command_argv(self, name: str, skill_text: str, args: Mapping[str, Any]) -> tuple[list[str], bytes]:
        return _provider.command_argv(name, _provider.declared_args(skill_text), args)
