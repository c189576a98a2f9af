"""Every discovered toolkit an MCP client can use, built or not.

:class:`ServedProvider` is the runtime's tool provider (``wbcore_runtime.contract.tools``, served by
``wbcore-act``) plus the toolkits found on the search path that nothing is registered for yet but that a build
would accept (``wbcore_runtime.toolkit.verify`` passes and ``wbcore_runtime.build.buildable.refusals`` is
empty). Their tools are listed as they will be once built (a command's ``<toolkit>.<CLI_BIN>`` with the
schema its skill declares, a kernel's ``<toolkit>.<name>``); the first call builds the
toolkit (``wbcore_runtime.build.builder.build``, the one build path) and then runs. A component's
functions are known only from its built artifact, so an unbuilt component is listed as one
tool named after the toolkit whose call builds it and answers with the functions now served
(the server then sends ``notifications/tools/list_changed``).

Toolkits that cannot be served are never listed; :meth:`ServedProvider.unserved` says why
for each (``wbx mcp tools --all``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract import tools as _tools
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.contract.tools import (
    CallOutcome,
    Content,
    ContentPart,
    Error,
    LocalizedString,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolError,
)

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.runtime import Runtime

#: ``(stage, detail)`` of a build step, as ``wbcore_runtime.build.builder.build`` reports it.
BuildProgress = Callable[[str, str], None]
#: Input of an unbuilt component's one tool: nothing (the call builds it).
BUILD_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class Unserved:
    """A discovered toolkit that serves no tool, and why (shown by ``wbx mcp tools --all``)."""

    toolkit: str
    reason: str


def _first_failure(tk: Any, runtime: RuntimeServices) -> str | None:
    """What ``wbx toolkit verify`` and a build would refuse first, or ``None``."""
    from wbcore_runtime.build import buildable
    from wbcore_runtime.trust import verdict as trust
    from wbcore_runtime.toolkit.verify import verify

    why = trust.unavailable_reason(tk, runtime)
    if why:
        return why
    refused = buildable.refusals(runtime, tk.manifest)
    if refused:
        return refused[0].message
    report = verify(tk, runtime)
    failed = next((c for c in report.checks if not c.ok and not c.warning), None)
    return f"verify: {failed.area}: {failed.message}" if failed is not None else None


class ServedProvider(_tools.ToolTable):
    """The tool provider MCP serves: registered tools, plus unbuilt toolkits built on first call.

    It wraps the runtime's provider (``contract.tools.service(runtime).provider``): the
    registered tools and every call are that provider's; this adds the unbuilt ones."""

    def __init__(self, runtime: Runtime, *, only: Iterable[str] | None = None,
                 build_missing: bool = True) -> None:
        self.runtime = runtime
        self.service = _tools.service(runtime)  # NotFound naming wbcore-act when no provider is installed
        self.base = self.service.provider(only=only)
        self.only = self.base.only
        self.build_missing = build_missing
        self._tools: dict[str, Tool] | None = None
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}
        self._unserved: list[Unserved] = []
        self._build_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    # -- listing --

    def refresh_if_changed(self) -> bool:
        """Forget the list when the registry changed (a toolkit was built or removed)."""
        changed = self.base.refresh_if_changed()
        if changed:
            self._forget()
        return changed

    def selected(self, tool: Tool) -> bool:
        return self.base.selected(tool)

    def act_skills(self) -> dict[str, str]:
        return self.base.act_skills()

    def _build(self) -> dict[str, Tool]:
        tools = dict(self.base.tools())
        pending: dict[str, str] = {}
        unserved: list[Unserved] = []
        if self.build_missing:
            extra, pending, unserved = self._scan()
            for name, tool in extra.items():
                if name not in tools and self.selected(tool):
                    tools[name] = tool
        self._pending = {n: tk for n, tk in pending.items() if n in tools}
        self._unserved = unserved
        return dict(sorted(tools.items()))

    @property
    def pending(self) -> dict[str, str]:
        """Tool name → toolkit id, for the listed tools whose toolkit is not built yet."""
        self.tools()
        return self._pending

    def unserved(self) -> list[Unserved]:
        """Every discovered toolkit that serves no tool here, with the reason."""
        self.tools()
        return list(self._unserved)

    def _scan(self) -> tuple[dict[str, Tool], dict[str, str], list[Unserved]]:
        from wbcore_runtime.build import builder
        from wbcore_runtime.dispatch import resolve as resolution
        from wbcore_runtime.trust import policy

        rt = self.runtime
        found = rt.discover()
        registered: dict[str, list[Any]] = {}
        for entry in rt.registry.entries():
            if entry.toolkit:
                registered.setdefault(entry.toolkit, []).append(entry)
        tools: dict[str, Tool] = {}
        pending: dict[str, str] = {}
        unserved: list[Unserved] = []
        for tk_id in sorted(found.toolkits):
            tk = found.toolkits[tk_id]
            m = tk.manifest
            if tk_id in registered:
                whys = [w for w in (resolution.availability(rt, e) for e in registered[tk_id]) if w]
                if whys:
                    unserved.append(Unserved(tk_id, whys[0]))
                continue
            kind = builder.KINDS.get(m.exec or "")
            if kind is None:
                what = f"#+EXEC {m.exec}" if m.exec else "no #+EXEC"
                unserved.append(Unserved(tk_id, f"{what}: no tool to serve (its skills are resources)"))
                continue
            if not m.build_src:
                unserved.append(Unserved(tk_id, f"not built and no #+BUILD_SRC to build from ({m.path})"))
                continue
            try:
                why = _first_failure(tk, rt)
            except WbError as exc:
                why = exc.message
            if why:
                unserved.append(Unserved(tk_id, why))
                continue
            universe = rt.caps_universe_for(m.caps)
            prof = policy.profile_for(m.extra("PROFILE"), m.caps, universe)
            # an upper bound until built and granted
            caps = frozenset(m.caps) & universe.caps_of(prof)
            if kind == "component":
                name = tk_id
                desc = (f"{m.tagline or tk_id} (component toolkit {tk_id}, not built yet: calling this "
                        "builds it, then its functions are listed as tools)")
                td = ToolDefinition(name, LocalizedString(plain=desc), dict(BUILD_SCHEMA),
                                    self.service.annotations(caps, frozenset(), prof.timeout_s))
                tools[name] = Tool(td, "component", tk_id, tk_id, caps=caps,
                                   skills=tuple(s.slug for s in tk.skills))
            else:
                try:
                    target = builder.registered_name(tk, kind)
                except WbError as exc:
                    unserved.append(Unserved(tk_id, exc.message))
                    continue
                tool = self.service.draft(kind, target, tk, caps, prof.timeout_s)
                name = tool.name
                tools[name] = tool
            pending[name] = tk_id
        return tools, pending, unserved

    # -- building --

    def _toolkit_lock(self, toolkit: str) -> threading.Lock:
        with self._locks_lock:
            return self._build_locks.setdefault(toolkit, threading.Lock())

    def ensure_built(self, toolkit: str, progress: BuildProgress | None = None) -> bool:
        """Build ``toolkit`` unless something is registered for it already (one build at a
        time per toolkit; a second caller waits and then finds it built). Returns whether
        this call built it."""
        from wbcore_runtime.build import builder

        with self._toolkit_lock(toolkit):
            if any(e.toolkit == toolkit for e in self.runtime.registry.entries()):
                return False
            builder.build(self.runtime, toolkit, progress=progress)
        self.refresh_if_changed()
        return True

    def build_all(self,
                  progress: Callable[[str, str, str], None] | None = None) -> list[tuple[str, str | None]]:
        """Build every pending toolkit now (``wbx mcp serve --build``): ``(toolkit, error or None)``."""
        self.tools()
        out: list[tuple[str, str | None]] = []
        for tk_id in sorted(set(self.pending.values())):
            say = (lambda stage, detail, tk_id=tk_id: progress(tk_id, stage, detail)) if progress else None
            try:
                self.ensure_built(tk_id, say)
                out.append((tk_id, None))
            except WbError as exc:
                out.append((tk_id, exc.message))
        self.refresh_if_changed()
        self.tools()  # the list with the built tools, ready before the first request
        return out

    # -- calling --

    def call_json(self, name: str, args: Mapping[str, Any], *, cancel: threading.Event | None = None,
                  timeout: float | None = None, progress: Callable[[float, str], None] | None = None,
                  mounts: Sequence[str] = (), remote: str | None = None) -> CallOutcome:
        table = self.tools()
        toolkit = self._pending.get(name)
        drafted = table.get(name)
        # a table read while another caller's build landed may predate it: the provider's own
        # lookup (a refresh, then the registered tool) serves the name then
        if toolkit is None or drafted is None:
            return self.base.call_json(name, args, cancel=cancel, timeout=timeout, progress=progress,
                                       mounts=mounts, remote=remote)
        placeholder = drafted.kind == "component"

        def say(stage: str, detail: str) -> None:
            if progress is not None:
                progress(0.0, f"building {toolkit}: [{stage}] {detail}")

        try:
            self.ensure_built(toolkit, say)
        except WbError as exc:
            return CallOutcome([Error(ToolError.from_wb(exc))])
        if placeholder:
            served = sorted(n for n, t in self.tools().items()
                            if t.toolkit == toolkit and n not in self.pending)
            text = f"built {toolkit}; its tools: {', '.join(served) or '(none)'}"
            return CallOutcome([Content(ContentPart(text.encode(), "text/plain"))],
                               structured={"tools": served})
        return self.base.call_json(name, args, cancel=cancel, timeout=timeout, progress=progress,
                                   mounts=mounts, remote=remote)

    def call_tool(self, call: ToolCall, *, cancel: threading.Event | None = None,
                  timeout: float | None = None,
                  progress: Callable[[float, str], None] | None = None) -> CallOutcome:
        """An ACT call: a registered tool's is the provider's; an unbuilt one is built first
        (:meth:`call_json`), its deadline shortened by ``std:timeout-ms`` as the provider would."""
        if call.name not in self.pending:
            return self.base.call_tool(call, cancel=cancel, timeout=timeout, progress=progress)
        try:
            args = call.args_map()
        except WbError as exc:
            return CallOutcome([Error(ToolError.from_wb(exc))])
        return self.call_json(call.name, args, cancel=cancel, timeout=call.deadline(timeout),
                              progress=progress)
