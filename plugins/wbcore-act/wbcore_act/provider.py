"""Every registered toolkit as an ACT tool provider: one tool per command, kernel and
component function, each with a JSON Schema, annotations derived from caps and skills,
and one call path (used by ``wbx call`` and the MCP server alike).

Tool names are ``<toolkit>.<tool>``: the command's ``#+CLI_BIN``, the kernel's name, or
the component's exported function. Inputs:

- **command**: ``{"args": [str], "stdin": str}``; richer when a skill declares arguments
  with ``#+ARG: <name>[:<type>][!] <description>`` lines (``!`` = required; types
  string, integer, number, boolean; passed as ``--<name> <value>``, a true boolean as
  ``--<name>``, before the positional ``args``). A skill's ``#+FLAGS:`` line may say
  ``destructive`` and/or ``idempotent``. The skill read is ``skills/<tool>.org``, else
  ``skills/overview.org``.
- **kernel**: ``{"input": str}`` (UTF-8 text) or ``{"input_base64": str}``: bytes in,
  bytes out.
- **component**: the function's parameters, derived from its WIT types.
- **ACT tool provider** (a component exporting ``act:tools/tool-provider``): its own
  tools, as its ``list-tools`` lists them (name, description, JSON Schema, ``std:``
  annotations), each called through its ``call-tool`` with the arguments as CBOR and
  the call's metadata; its events and error kinds are the call's. Its raw
  ``list-tools``/``call-tool`` functions are not tools themselves.

A tool is read-only when its toolkit's effective caps include no write-capable cap.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, WbError
from wbcore_runtime.contract.tools import (
    STD_DESTRUCTIVE,
    STD_IDEMPOTENT,
    STD_READ_ONLY,
    STD_SKILL,
    STD_TIMEOUT_MS,
    Content,
    ContentPart,
    Error,
    LocalizedString,
    Metadata,
    MetadataEvent,
    StreamEvent,
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolErrorKind,
)
from wbcore_runtime.contract.tools import CallOutcome, DeclaredArg, Tool, ToolTable
from wbcore_runtime.contract import cbor
from wbcore_runtime.dispatch import resolve as resolution, tiers
from wbcore_runtime.trust import policy
from wbcore_runtime.trust import verdict as trust

from wbcore_act import sections, wire

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices

#: The interface an ACT tool-provider component exports (any version).
ACT_PROVIDER_IFACE = "act:tools/tool-provider"
ACT_FUNCTIONS = ("list-tools", "call-tool")
#: Caps through which a guest cannot change anything the host keeps (fetching, asking a model).
READ_ONLY_CAPS = frozenset({"browse", "llm"})
ARG_RE = re.compile(r"^[ \t]*#\+ARG:[ \t]*([A-Za-z][A-Za-z0-9_-]*)(?::(string|integer|number|boolean))?"
                    r"(!)?[ \t]*(.*)$", re.M)
FLAGS_RE = re.compile(r"^[ \t]*#\+FLAGS:[ \t]*(.*)$", re.M)
ARG_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float),
                                                 "boolean": bool}
MAX_STDIN = 64 << 20


# --- skills as argument declarations -------------------------------------------------


def _skill_text(runtime: RuntimeServices, tk: Any, tool: str) -> str:
    # A tool's declarations and flags come from the skill bytes its toolkit's signature covers.
    for slug in (tool, "overview"):
        try:
            return trust.skill_text(tk, runtime, slug)
        except WbError:
            continue
    return ""


def _lead(tk: Any, tool: str, tagline: str) -> str:
    """A tool's own skill summary (``skills/<tool>.org``) when it has one, else the tagline."""
    if tk is not None:
        for s in tk.skills:
            if s.slug == tool and s.summary:
                return s.summary
    return tagline


def declared_args(text: str) -> tuple[DeclaredArg, ...]:
    return tuple(
        DeclaredArg(m.group(1), m.group(2) or "string", bool(m.group(3)), m.group(4).strip())
        for m in ARG_RE.finditer(text)
    )


def skill_flags(text: str) -> frozenset[str]:
    flags: set[str] = set()
    for m in FLAGS_RE.finditer(text):
        flags.update(w.strip().lower() for w in re.split(r"[\s,]+", m.group(1)) if w.strip())
    return frozenset(flags)


def command_schema(declared: Sequence[DeclaredArg]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for a in declared:
        props[a.name] = {"type": a.type, "description": a.description} if a.description else {"type": a.type}
    props["args"] = {"type": "array", "items": {"type": "string"},
                     "description": "positional arguments (argv after the declared flags)"}
    props["stdin"] = {"type": "string", "description": "text written to the command's standard input"}
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    required = [a.name for a in declared if a.required]
    if required:
        schema["required"] = required
    return schema


KERNEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "input bytes as UTF-8 text"},
        "input_base64": {"type": "string", "contentEncoding": "base64", "description": "input bytes, base64"},
    },
    "additionalProperties": False,
}


def command_argv(name: str, declared: Sequence[DeclaredArg],
                 args: Mapping[str, Any]) -> tuple[list[str], bytes]:
    """A command tool's JSON arguments (``command_schema``) as ``(argv, stdin)``: every
    surface that runs a command tool (MCP, ``wbx call``, the agent loop) converts here."""
    allowed = {a.name for a in declared} | {"args", "stdin"}
    unknown = sorted(set(args) - allowed)
    if unknown:
        raise InvalidArgs(f"{name}: unknown argument(s) {', '.join(unknown)}; accepted: "
                          f"{', '.join(sorted(allowed))}")
    argv: list[str] = []
    for a in declared:
        if a.name not in args:
            if a.required:
                raise InvalidArgs(f"{name}: missing required argument {a.name!r}")
            continue
        v = args[a.name]
        want = ARG_TYPES[a.type]
        if (isinstance(v, bool) and a.type != "boolean") or not isinstance(v, want):
            raise InvalidArgs(f"{name}: argument {a.name!r} must be {a.type}, got {type(v).__name__}")
        if a.type == "boolean":
            if v:
                argv.append(f"--{a.name}")
        else:
            argv += [f"--{a.name}", str(v)]
    pos = args.get("args", [])
    if not isinstance(pos, list) or not all(isinstance(x, str) for x in pos):
        raise InvalidArgs(f"{name}: 'args' must be an array of strings")
    stdin = args.get("stdin", "")
    if not isinstance(stdin, str):
        raise InvalidArgs(f"{name}: 'stdin' must be a string")
    data = stdin.encode("utf-8")
    if len(data) > MAX_STDIN:
        raise InvalidArgs(f"{name}: stdin of {len(data)} bytes is over the {MAX_STDIN}-byte cap")
    return argv + pos, data


def cap_note(runtime: RuntimeServices, caps: frozenset[str]) -> str:
    """What a tool's plugin-declared caps let it do, for its description (core caps are
    known to clients; a plugin's are named with their meaning and who declared them)."""
    universe = runtime.caps_universe_for(caps)
    notes = [f"{c}: {universe.plugin_caps[c].meaning}, from {universe.plugin_caps[c].origin}"
             for c in sorted(caps) if c in universe.plugin_caps]
    return f" [plugin caps: {'; '.join(notes)}]" if notes else ""


def _annotations(caps: frozenset[str], flags: frozenset[str], timeout_s: float | None) -> Metadata:
    read_only = not (caps - READ_ONLY_CAPS)
    ann: dict[str, Any] = {
        STD_READ_ONLY: read_only,
        STD_DESTRUCTIVE: "destructive" in flags,
        STD_IDEMPOTENT: "idempotent" in flags or read_only,
    }
    if timeout_s:
        ann[STD_TIMEOUT_MS] = int(timeout_s * 1000)
    return Metadata(ann)


# --- the provider ---------------------------------------------------------------------


class ToolkitProvider(ToolTable):
    """The ACT tool-provider over a :class:`~wbcore_runtime.runtime.Runtime`.

    ``only``: tool names (or toolkit ids) to expose; ``None`` exposes every tool.
    """

    def __init__(self, runtime: RuntimeServices, *, principal: Principal | None = None,
                 only: Iterable[str] | None = None) -> None:
        self.runtime = runtime
        self.principal = principal
        self.only = frozenset(only) if only is not None else None
        self._tools: dict[str, Tool] | None = None
        self._seen: tuple[tuple[str, str, str], ...] | None = None
        self._lock = threading.Lock()

    # -- discovery --

    def _fingerprint(self) -> tuple[tuple[str, str, str], ...]:
        return tuple((e.kind, e.name, e.sha256) for e in self.runtime.registry.entries())

    def refresh_if_changed(self) -> bool:
        """Rebuild the tool list when the registry changed (a toolkit was built or removed
        while serving). Returns whether it did."""
        fp = self._fingerprint()
        if self._tools is not None and fp == self._seen:
            return False
        with self._lock:
            self._tools = None
            self._seen = fp
        return True

    def act_skills(self) -> dict[str, str]:
        """``act:skill`` texts carried by component artifacts, by toolkit (or component) name."""
        out: dict[str, str] = {}
        for tool in self.tools().values():
            text = tool.definition.extensions.get(STD_SKILL)
            if tool.kind == "component" and isinstance(text, str):
                out.setdefault(tool.toolkit or tool.target, text)
        return out

    def selected(self, tool: Tool) -> bool:
        return self.only is None or tool.name in self.only or (tool.toolkit or "") in self.only

    def _build(self) -> dict[str, Tool]:
        rt = self.runtime
        found = rt.discover()
        tools: dict[str, Tool] = {}
        for entry in rt.registry.entries():
            tk = None
            if entry.toolkit:
                try:
                    tk = found.get(entry.toolkit)
                except WbError:
                    tk = None
            if not entry.builtin and (tk is None or resolution.availability(rt, entry) is not None):
                continue  # orphaned or unavailable: never served (``wbx commands`` says why)
            try:
                caps = rt.resolve(entry.kind, entry.name).caps
            except WbError:
                continue
            prof = policy.profile(entry.profile)
            skills = tuple(s.slug for s in tk.skills) if tk is not None else ()
            prefix = f"{entry.toolkit}." if entry.toolkit else ""
            tagline = tk.manifest.tagline if tk is not None else f"built-in command {entry.name}"
            if entry.kind == "command":
                text = _skill_text(rt, tk, entry.name) if tk is not None else ""
                declared = declared_args(text)
                name = prefix + entry.name
                desc = (f"{_lead(tk, entry.name, tagline)} (runs the sandboxed command `{entry.name}`: argv "
                        "+ stdin → stdout)"
                        + cap_note(rt, caps))
                td = ToolDefinition(name, LocalizedString(plain=desc), command_schema(declared),
                                    _annotations(caps, skill_flags(text), prof.timeout_s))
                tools[name] = Tool(td, "command", entry.name, entry.toolkit, declared=declared, caps=caps,
                                   skills=skills)
            elif entry.kind == "kernel":
                name = prefix + entry.name
                text = _skill_text(rt, tk, entry.name) if tk is not None else ""
                desc = (f"{_lead(tk, entry.name, tagline)} (kernel `{entry.name}`: bytes in → bytes out)"
                        + cap_note(rt, caps))
                td = ToolDefinition(name, LocalizedString(plain=desc), dict(KERNEL_SCHEMA),
                                    _annotations(caps, skill_flags(text), prof.timeout_s))
                tools[name] = Tool(td, "kernel", entry.name, entry.toolkit, caps=caps, skills=skills)
            elif entry.kind == "component":
                tools.update(self._component_tools(entry, tk, caps, prof, skills, tagline))
        return {n: t for n, t in sorted(tools.items()) if self.selected(t)}

    def _component_tools(self, entry: Any, tk: Any, caps: frozenset[str], prof: Any, skills: tuple[str, ...],
                         tagline: str) -> dict[str, Tool]:
        runner = self._runner("component")
        try:
            fns = runner.functions(entry.sha256)
        except WbError:
            return {}
        info = None
        try:
            info = sections.read_act_info(self.runtime.artifacts.read_verified(entry.sha256))
        except WbError:
            info = None
        out: dict[str, Tool] = {}
        prefix = f"{entry.toolkit or entry.name}."
        act_fns = {fn.export[-1]: fn for fn in fns
                   if len(fn.export) == 2 and fn.export[0].split("@")[0] == ACT_PROVIDER_IFACE}
        if set(ACT_FUNCTIONS) <= set(act_fns):
            out.update(self._provided_tools(entry, prefix, act_fns, caps, prof, skills, info))
            fns = [fn for fn in fns if fn not in act_fns.values()]
        for fn in fns:
            text = _skill_text(self.runtime, tk, fn.name) if tk is not None else ""
            name = prefix + fn.name
            desc = f"{_lead(tk, fn.name, tagline)} (component function {fn.name}, typed by WIT)"
            ext: dict[str, Any] = {}
            if info is not None and info.skill:
                ext[STD_SKILL] = info.skill
            if info is not None and info.description:
                desc = f"{info.description.text()} — {desc}"
            td = ToolDefinition(name, LocalizedString(plain=desc), fn.input_schema(),
                                _annotations(caps, skill_flags(text), prof.timeout_s), Metadata(ext))
            out[name] = Tool(td, "component", entry.name, entry.toolkit, function=fn.name, caps=caps,
                             skills=skills, output_schema=fn.output_schema())
        return out

    def _provided_tools(self, entry: Any, prefix: str, act_fns: Mapping[str, Any], caps: frozenset[str],
                        prof: Any, skills: tuple[str, ...], info: Any) -> dict[str, Tool]:
        """The tools an ACT tool-provider component lists itself (its ``list-tools``)."""
        try:
            principal = Principal(self.principal.tenant, entry.toolkit or self.principal.toolkit) \
                if self.principal is not None else Principal(toolkit=entry.toolkit or "")
            res = self.runtime.component_call(entry.name, act_fns["list-tools"].name, {"metadata": []},
                                              principal=principal)
            listed = wire.get(res.value.get("ok") if isinstance(res.value, Mapping) else None, "tools") or []
            defs = [wire.provided_tool(t) for t in listed]
        except WbError:
            return {}  # a provider that cannot list its tools serves none (``wbx call`` says why)
        out: dict[str, Tool] = {}
        for td in defs:
            name = prefix + td.name
            host = _annotations(caps, frozenset(), prof.timeout_s)
            ann = {**dict(host), **dict(td.annotations)}
            # read-only only when both agree: the component's claim (absent: not destructive)
            # and the host's caps
            own = td.annotations.get(STD_READ_ONLY, not td.destructive)
            ann[STD_READ_ONLY] = bool(host[STD_READ_ONLY]) and bool(own)
            ext: dict[str, Any] = dict(td.extensions)
            if info is not None and info.skill:
                ext[STD_SKILL] = info.skill
            desc = td.description.text() if td.description else ""
            if info is not None and info.description and not desc:
                desc = info.description.text()
            full = ToolDefinition(name,
                                  LocalizedString(plain=f"{desc} (ACT tool {td.name} of component "
                                                        f"{entry.name})"),
                                  td.input_schema or {"type": "object"}, Metadata(ann), Metadata(ext))
            out[name] = Tool(full, "component", entry.name, entry.toolkit, function=act_fns["call-tool"].name,
                             caps=caps, skills=skills, act_tool=td.name)
        return out

    def _runner(self, shape: str) -> Any:
        return tiers.shape_runner(self.runtime, shape)

    # -- calling --

    def call_tool(self, call: ToolCall, *, cancel: threading.Event | None = None,
                  timeout: float | None = None,
                  progress: Callable[[float, str], None] | None = None) -> CallOutcome:
        """Run one tool call; every expected failure is an error event, never an exception
        (except an unknown tool, which is ``NotFound`` — a protocol error for MCP)."""
        tool = self.tool(call.name)
        timeout = call.deadline(timeout)
        try:
            args = call.args_map()
            if tool.act_tool is not None:
                return self._call_act(tool, args, cancel, timeout, call.metadata)
            return self.call_json(tool.name, args, cancel=cancel, timeout=timeout, progress=progress)
        except WbError as exc:
            return CallOutcome([Error(ToolError.from_wb(exc))])

    def call_json(self, name: str, args: Mapping[str, Any], *, cancel: threading.Event | None = None,
                  timeout: float | None = None, progress: Callable[[float, str], None] | None = None,
                  mounts: Sequence[str] = (), remote: str | None = None) -> CallOutcome:
        """``mounts``: host folders for a command tool, asked for by ``remote`` (the core's
        ``dispatch.mounts.grant`` decides: inside ``WB_MOUNT_ROOTS`` only)."""
        tool = self.tool(name)
        try:
            if mounts and tool.kind != "command":
                raise InvalidArgs(f"{tool.name}: host folders (mounts) bind only into commands; this is a "
                                  f"{tool.kind}")
            if progress:
                progress(0.0, f"starting {tool.name}")
            if tool.kind == "command":
                out = self._call_command(tool, args, timeout, cancel, mounts, remote)
            elif tool.kind == "kernel":
                out = self._call_kernel(tool, args, timeout)
            elif tool.act_tool is not None:
                out = self._call_act(tool, args, cancel, timeout)
            else:
                out = self._call_component(tool, args, cancel, timeout)
            if progress:
                progress(1.0, f"{tool.name} finished")
            return out
        except WbError as exc:
            return CallOutcome([Error(ToolError.from_wb(exc))])

    def _principal(self, tool: Tool) -> Principal:
        if self.principal is not None:
            return Principal(self.principal.tenant, tool.toolkit or self.principal.toolkit)
        return Principal(toolkit=tool.toolkit or "")

    def _call_command(self, tool: Tool, args: Mapping[str, Any], timeout: float | None,
                      cancel: threading.Event | None = None, mounts: Sequence[str] = (),
                      remote: str | None = None) -> CallOutcome:
        argv, data = command_argv(tool.name, tool.declared, args)
        kw: dict[str, Any] = {"cancel": cancel} if cancel is not None else {}
        if mounts:
            kw.update(mounts=mounts, remote=remote)
        res = self.runtime.call(tool.target, argv, data, principal=self._principal(tool), timeout=timeout,
                                **kw)
        events: list[StreamEvent] = [Content(_bytes_part(res.stdout))]
        usage = res.usage.as_dict() if hasattr(res.usage, "as_dict") else {}
        meta = {"wb:exit-code": res.exit_code, "wb:usage": usage}
        if res.stderr:
            meta["wb:stderr"] = res.stderr.decode("utf-8", errors="replace")[-4000:]
        events.append(MetadataEvent(Metadata(meta)))
        if res.exit_code != 0:
            tail = res.stderr.decode("utf-8", errors="replace").strip()[-2000:]
            msg = f"{tool.target} exited with code {res.exit_code}" + (f": {tail}" if tail else "")
            events.append(Error(ToolError(ToolErrorKind.OTHER, LocalizedString(plain=msg),
                                          other="wb:exit-code",
                                          extensions=Metadata({"wb:exit-code": res.exit_code}))))
        return CallOutcome(events, usage=usage)

    def _call_kernel(self, tool: Tool, args: Mapping[str, Any], timeout: float | None) -> CallOutcome:
        unknown = sorted(set(args) - {"input", "input_base64"})
        if unknown:
            raise InvalidArgs(f"{tool.name}: unknown argument(s) {', '.join(unknown)}; accepted: input, "
                              "input_base64")
        if "input" in args and "input_base64" in args:
            raise InvalidArgs(f"{tool.name}: give 'input' or 'input_base64', not both")
        if "input_base64" in args:
            raw = args["input_base64"]
            if not isinstance(raw, str):
                raise InvalidArgs(f"{tool.name}: 'input_base64' must be a string")
            try:
                data = base64.b64decode(raw, validate=True)
            except ValueError:
                raise InvalidArgs(f"{tool.name}: 'input_base64' is not valid base64") from None
        else:
            text = args.get("input", "")
            if not isinstance(text, str):
                raise InvalidArgs(f"{tool.name}: 'input' must be a string")
            data = text.encode("utf-8")
        out = self.runtime.kernel_call(tool.target, data, principal=self._principal(tool), timeout=timeout)
        return CallOutcome([Content(_bytes_part(bytes(out)))])

    def _call_component(self, tool: Tool, args: Mapping[str, Any], cancel: threading.Event | None,
                        timeout: float | None) -> CallOutcome:
        try:
            res = self.runtime.component_call(tool.target, tool.function or "", dict(args),
                                              principal=self._principal(tool), timeout=timeout, cancel=cancel)
        except WbError as exc:
            if not hasattr(exc, "detail"):
                raise
            detail = exc.detail
            part = ContentPart(json.dumps({"err": detail}).encode(), "application/json")
            return CallOutcome([Content(part), Error(ToolError(
                ToolErrorKind.OTHER, LocalizedString(plain=exc.message), other="wb:result-err"))],
                structured={"err": detail})
        part = ContentPart(json.dumps(res.value, ensure_ascii=False).encode(), "application/json")
        return CallOutcome([Content(part)], structured=res.value, usage=res.usage.as_dict())


    def _call_act(self, tool: Tool, args: Mapping[str, Any], cancel: threading.Event | None,
                  timeout: float | None, metadata: Mapping[str, Any] | None = None) -> CallOutcome:
        """One ``call-tool`` of an ACT provider: arguments as deterministic CBOR, the
        call's metadata as CBOR pairs; its events (content, metadata, a terminal error
        with its own kind) are the outcome."""
        payload = {
            "name": tool.act_tool,
            "arguments": base64.b64encode(cbor.dumps(dict(args))).decode("ascii"),
            "metadata": [[k, base64.b64encode(v).decode("ascii")]
                         for k, v in cbor.encode_metadata(metadata or {})],
        }
        res = self.runtime.component_call(tool.target, tool.function or "", payload,
                                          principal=self._principal(tool), timeout=timeout, cancel=cancel)
        events = wire.provided_result(res.value)
        structured = None
        if len(events) == 1 and isinstance(events[0], Content):
            mt = (events[0].part.mime_type or "").split(";")[0].strip().lower()
            if mt in ("application/json", "application/cbor"):
                value = events[0].part.value()
                structured = value if isinstance(value, dict) else None
        return CallOutcome(events, structured=structured, usage=res.usage.as_dict())


def _bytes_part(data: bytes) -> ContentPart:
    try:
        return ContentPart(data.decode("utf-8").encode("utf-8"), "text/plain")
    except UnicodeDecodeError:
        return ContentPart(data, "application/octet-stream")
