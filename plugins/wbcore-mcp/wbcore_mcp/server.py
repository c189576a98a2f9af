"""The MCP server: every registered command, kernel and component as a tool, every
skill as a resource, on the official ``mcp`` SDK's low-level ``Server``.

Behaviour per the MCP 2025-11-25 specification:

- ``tools/list``: one tool per ACT tool (``<toolkit>.<tool>``) with its JSON Schema and
  annotations (``readOnlyHint`` when no write-capable cap is granted; ``destructiveHint``
  / ``idempotentHint`` from the skill's ``#+FLAGS:``), plus ``search_tools``. With
  ``only=``, just the chosen tools (or toolkits) are listed and callable.
- ``tools/call``: an unknown tool is a JSON-RPC error (-32602, a protocol error);
  argument errors, denied caps, timeouts, traps and non-zero exits are results with
  ``isError: true`` and a message the model can read. A call with a progress token
  gets ``notifications/progress`` while it runs. ``notifications/cancelled`` (or a
  dropped connection) sets the call's cancel event: a command or component guest
  stops at the next epoch tick; a kernel stops at its deadline.
- ``resources/list`` / ``resources/read``: skills as ``skill://<toolkit>/<slug>``
  (``text/org``), and a component's embedded ``act:skill`` as
  ``skill://<toolkit>/act-skill`` (``text/markdown``); ``skills/list`` /
  ``skills/get``: the skills extension's methods.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract import http_server
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.contract.http_server import HttpServer, ServerLimits
from wbcore_runtime.dispatch import mounts as granting
from wbcore_runtime.trust.policy import CAP_UNIVERSE

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

SERVER_NAME = "wbcore"
SKILL_SCHEME = "skill://"
SKILL_MIME = "text/org"
#: A component's embedded ``act:skill`` section (markdown), served beside its skills/ files.
ACT_SKILL_SLUG = "act-skill"
ACT_SKILL_MIME = "text/markdown"
SEARCH_TOOL = "search_tools"
#: The skills extension (SEP-2640), declared under ``capabilities.extensions``.
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
#: A toolkit's generated Agent Skill file, ``skill://<toolkit>/SKILL.md``.
SKILL_MD = "SKILL.md"
SKILL_MD_MIME = "text/markdown"
SKILL_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
PROGRESS_EVERY_S = 1.0
MAX_SEARCH_RESULTS = 50
#: ``_meta`` key a client may set on ``tools/call`` to shorten the deadline (milliseconds).
TIMEOUT_META = "wbcore/timeout-ms"
#: ``_meta`` key of host folders for a command tool's call (``["HOST[:GUEST][:ro|rw]", …]``):
#: ``_meta`` rather than an argument, so no tool's input schema carries it; granted by the
#: core's ``dispatch.mounts.grant`` as the MCP client's, only inside the deployer's ``WB_MOUNT_ROOTS``.
MOUNTS_META = "wbcore/mounts"
#: The principal an MCP client is named by in the audit trail.
REMOTE = "mcp"
#: Streamable HTTP: stateful sessions open at once, and the idle time after which one closes
#: (the SDK's own settings; its defaults are 10,000 and 30 minutes).
MAX_SESSIONS = 256
SESSION_IDLE_S = 600.0

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string",
                  "description": "words to look for in tool names, descriptions and skills"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
    },
    "required": ["query"],
    "additionalProperties": False,
}


async def _declare_extensions(ctx: Any, call_next: Any) -> Any:
    """Put ``capabilities.extensions`` on every ``initialize`` answer. The SDK serialises the
    answer with the negotiated version's schema, and the 2025-11-25 schema has no
    ``extensions``, so the SDK drops it there; clients of that version that implement SEP-2133
    extensions (the official MCP Inspector 2.x: "Server does not declare the
    io.modelcontextprotocol/skills extension") look for it nowhere else. An unknown field
    is ignored by every other client; ``experimental`` keeps the declaration for older ones."""
    result = await call_next(ctx)
    if getattr(ctx, "method", None) == "initialize" and isinstance(result, dict):
        caps = result.get("capabilities")
        if isinstance(caps, dict):
            declared = caps.get("extensions")
            declared = declared if isinstance(declared, dict) else {}
            caps["extensions"] = {**declared, SKILLS_EXTENSION: declared.get(SKILLS_EXTENSION, {})}
    return result


def _mcp_tool(tool: Any) -> Any:
    import mcp_types as types

    d = tool.definition
    ann = types.ToolAnnotations(
        title=tool.name,
        read_only_hint=d.read_only,
        destructive_hint=False if d.read_only else d.destructive,
        idempotent_hint=d.idempotent,
        # a plugin's cap may reach anything: the hint errs open
        open_world_hint=bool(tool.caps & {"net", "browse", "llm", "tcp", "udp", "tls"}
                             or tool.caps - CAP_UNIVERSE),
    )
    out_schema = None
    if tool.output_schema is not None:
        out_schema = {"type": "object", "properties": {"result": dict(tool.output_schema)},
                      "required": ["result"]}
    return types.Tool(
        name=tool.name, description=tool.description, input_schema=dict(d.input_schema or {"type": "object"}),
        output_schema=out_schema, annotations=ann,
    )


def search(provider: Any, query: str, limit: int = 20) -> list[dict[str, Any]]:
    """Tools whose name, description or skills mention every word of ``query``."""
    words = [w.lower() for w in query.split() if w]
    hits: list[tuple[int, dict[str, Any]]] = []
    for tool in provider.tools().values():
        hay = " ".join([tool.name, tool.description, " ".join(tool.skills)]).lower()
        if all(w in hay for w in words):
            score = sum(3 if w in tool.name.lower() else 1 for w in words)
            hits.append((score, {"name": tool.name, "description": tool.description,
                                 "input_schema": dict(tool.definition.input_schema or {})}))
    hits.sort(key=lambda h: (-h[0], h[1]["name"]))
    return [h for _, h in hits[:limit]]


def _skills(runtime: Runtime, toolkits: Iterable[str] | None) -> list[tuple[Any, Any]]:
    from wbcore_runtime.trust import verdict as trust

    found = runtime.discover()
    wanted = set(toolkits) if toolkits is not None else None
    out: list[tuple[Any, Any]] = []
    for tk_id in sorted(found.toolkits):
        if wanted is not None and tk_id not in wanted:
            continue
        tk = found.toolkits[tk_id]
        if trust.unavailable_reason(tk, runtime):
            continue  # a tampered or unpinned toolkit's skills are not served (wbx toolkit list says why)
        out.extend((tk, s) for s in tk.skills)
    return out


def skills_models() -> tuple[type, type, type, type]:
    """Params and results of ``skills/list`` and ``skills/get`` (the skills extension,
    ``io.modelcontextprotocol/skills``: SEP-2640)."""
    import mcp_types as types

    class SkillsListParams(types.PaginatedRequestParams):
        pass

    class SkillsGetParams(types.RequestParams):
        uri: str

    class SkillsListResult(types.PaginatedResult, types.CacheableResult):
        result_type: str = "complete"
        skills: list[dict[str, Any]]

    class SkillsGetResult(types.CacheableResult):
        result_type: str = "complete"
        skill: dict[str, Any]

    return SkillsListParams, SkillsGetParams, SkillsListResult, SkillsGetResult


def skill_md(tk: Any) -> str | None:
    """The toolkit as an Agent Skill: a generated ``SKILL.md`` whose frontmatter is the
    toolkit's name and tagline and whose body points at its org skills (supporting files
    beside it, ``skill://<toolkit>/<slug>``). ``None`` when the toolkit id is not a valid
    Agent Skills name (lower-case letters, digits, single hyphens, ≤ 64 characters)."""
    if len(tk.id) > 64 or not SKILL_NAME_RE.match(tk.id):
        return None
    description = " ".join((tk.manifest.tagline or f"Toolkit {tk.id}").split())[:1024]
    lines = ["---", f"name: {tk.id}", f"description: {json.dumps(description, ensure_ascii=False)}", "---",
             "", f"# {tk.id}", "", description, "",
             "Its skills (org files beside this one; read them with resources/read, `overview` first):", ""]
    for s in tk.skills:
        summary = f": {' '.join(s.summary.split())}" if s.summary else ""
        lines.append(f"- [{s.title or s.slug}]({s.slug}){summary}")
    lines += ["", f"Its tools are named `{tk.id}.<tool>` (tools/list).", ""]
    return "\n".join(lines)


def _digest(data: bytes) -> dict[str, Any]:
    import hashlib

    return {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def skill_entry(tk: Any) -> dict[str, Any] | None:
    """The extension's ``Skill`` entry for a toolkit: its ``SKILL.md`` URI, the frontmatter,
    and every file with its digest (the bytes ``resources/read`` returns)."""
    from wbcore_runtime.contract.errors import WbError

    md = skill_md(tk)
    if md is None:
        return None
    uri = f"{SKILL_SCHEME}{tk.id}/{SKILL_MD}"
    files = [{"uri": uri, **_digest(md.encode())}]
    for s in tk.skills:
        try:
            files.append({"uri": f"{SKILL_SCHEME}{tk.id}/{s.slug}",
                          **_digest(tk.skill_text(s.slug).encode())})
        except WbError:
            continue  # refused since discovery (a swapped file): not part of the skill
    description = md.split("\n")[2][len("description: "):]
    return {"uri": uri, "frontmatter": {"name": tk.id, "description": json.loads(description)},
            "resources": files}


def build_server(runtime: Runtime, *, only: Iterable[str] | None = None, search_tool: bool = True,
                 timeout: float | None = None, warm: bool = False, build_missing: bool = True) -> Any:
    """The low-level ``mcp`` Server over ``runtime`` (not yet running). ``build_missing``:
    list unbuilt but buildable toolkits too, and build each on its first call."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    from wbcore_mcp.unbuilt import ServedProvider
    from wbcore_runtime.contract.tools import Content

    provider = ServedProvider(runtime, only=only, build_missing=build_missing)

    class _Server(Server):
        def create_initialization_options(self, notification_options: Any = None,
                                          experimental_capabilities: Any = None,
                                          extensions: Any = None) -> Any:
            # tools.listChanged: a toolkit built on its first call changes the list. The skills
            # extension is declared under ``extensions`` (2026-07-28 wire) and, because the SDK's
            # 2025-11-25 schema drops that field, under ``experimental`` too.
            return super().create_initialization_options(
                notification_options or NotificationOptions(tools_changed=True),
                experimental_capabilities or {SKILLS_EXTENSION: {}}, extensions)
    only_names = None if only is None else frozenset(only)

    def only_toolkits() -> set[str] | None:
        # The toolkits the chosen tools belong to (names given as toolkit ids count too).
        if only_names is None:
            return None
        return {t.toolkit for t in provider.tools().values() if t.toolkit} | set(only_names)

    def _refreshed() -> dict[str, Any]:
        provider.refresh_if_changed()
        return provider.tools()

    async def tools_ready() -> dict[str, Any]:
        # The first build of the list may compile components: keep the event loop free.
        return await anyio.to_thread.run_sync(provider.tools)

    async def list_tools(ctx: Any, params: Any) -> Any:
        await anyio.to_thread.run_sync(provider.refresh_if_changed)  # a toolkit built while serving shows up
        tools = [_mcp_tool(t) for t in (await tools_ready()).values()]
        if search_tool:
            tools.append(types.Tool(
                name=SEARCH_TOOL,
                description="Find tools by keywords when many are installed; returns names, descriptions and "
                            "input schemas.",
                input_schema=SEARCH_SCHEMA,
                annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True,
                                                  open_world_hint=False),
            ))
        return types.ListToolsResult(tools=tools)

    def _error(text: str) -> Any:
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)

    async def call_tool(ctx: Any, params: Any) -> Any:
        meta = params.meta if isinstance(params.meta, dict) else (
            params.meta.model_dump(by_alias=True) if params.meta is not None else {})
        return await answer(params.name, params.arguments or {}, meta or {}, ctx)

    async def answer(name: str, args: dict[str, Any], meta: dict[str, Any], ctx: Any,
                     raw: bool = False) -> Any:
        """One ``tools/call``: the SDK's handler and the lean paths (``wbcore_mcp.fastpath``,
        ``ctx`` None: no progress asked) both come here. ``raw``: the result as its JSON
        object rather than a ``CallToolResult`` (the lean paths write it as it is)."""
        if search_tool and name == SEARCH_TOOL:
            query = args.get("query")
            limit = args.get("limit", 20)
            if not isinstance(query, str) or not isinstance(limit, int) or isinstance(limit, bool):
                return _error("search_tools: 'query' must be a string and 'limit' an integer")
            limit = max(1, min(limit, MAX_SEARCH_RESULTS))
            hits = await anyio.to_thread.run_sync(search, provider, query, limit)  # may list the tools anew
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(hits, indent=1))],
                                        structured_content={"tools": hits})
        known_tools = provider._tools if provider._tools is not None else await tools_ready()
        if name not in known_tools:
            # built meanwhile? The registry read (it may wait on another process's write) and the
            # new list are made off the event loop, which serves every other client
            known_tools = await anyio.to_thread.run_sync(_refreshed)
            if name not in known_tools:
                known = ", ".join(list(known_tools)[:20])
                raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}; known: {known}")

        try:  # bounded (count, bytes) before the call; refused mounts are a result the model reads
            mounts = granting.requested(meta.get(MOUNTS_META), f"_meta {MOUNTS_META!r}")
        except WbError as exc:
            return _error(f"{exc.name}: {exc.message}")
        deadline = timeout
        ms = meta.get(TIMEOUT_META)
        if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0:
            deadline = ms / 1000.0 if deadline is None else min(deadline, ms / 1000.0)

        cancel = threading.Event()
        done = anyio.Event()
        started = time.monotonic()

        async def report() -> None:
            # Long calls report progress; the SDK sends nothing unless the caller asked.
            while not done.is_set():
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await done.wait()
                if not done.is_set():
                    await ctx.session.report_progress(time.monotonic() - started, None,
                                                      f"{name}: running for "
                                                      f"{time.monotonic() - started:.0f} s")

        building = name in provider.pending
        wants_progress = ctx is not None and meta.get("progress_token", meta.get("progressToken")) is not None

        def step(fraction: float, message: str) -> None:
            # From the worker thread: a build step becomes a progress notification.
            if ctx is not None:
                anyio.from_thread.run(ctx.session.report_progress, time.monotonic() - started, None, message)

        def run() -> Any:
            return provider.call_json(name, args, cancel=cancel, timeout=deadline,
                                      progress=step if building else None,  # a no-op unless asked
                                      mounts=mounts, remote=REMOTE if mounts else None)

        try:
            if not wants_progress:
                # No progress asked for: no reporter task (it costs a task group per call).
                outcome = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(report)
                    try:
                        outcome = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
                    finally:
                        done.set()
        except BaseException:
            cancel.set()  # the guest stops at its next epoch tick; the thread then returns
            raise
        if building and ctx is not None and name not in provider.pending:
            await ctx.session.send_tool_list_changed()  # built: its real tools are listed now

        texts: list[str] = []
        for ev in outcome.events:
            if isinstance(ev, Content):
                v = ev.part.value()
                if isinstance(v, bytes):
                    import base64

                    texts.append("base64:" + base64.b64encode(v).decode())
                else:
                    texts.append(v if isinstance(v, str) else json.dumps(v))
        err = outcome.error
        structured = None
        if err is not None:
            texts.append(f"{err.kind_name}: {err.text}")
        else:
            served = provider.tools().get(name)
            if served is not None and served.output_schema is not None:
                structured = {"result": outcome.structured}
        if raw:
            out: dict[str, Any] = {"content": [{"type": "text", "text": t} for t in texts or [""]]}
            if err is not None:
                out["isError"] = True
            elif structured is not None:
                out["structuredContent"] = structured
            return out
        content: list[types.ContentBlock] = [types.TextContent(text=t) for t in texts or [""]]
        if err is not None:
            return types.CallToolResult(content=content, is_error=True)
        return types.CallToolResult(content=content, structured_content=structured)

    async def list_resources(ctx: Any, params: Any) -> Any:
        res = [
            types.Resource(
                uri=f"{SKILL_SCHEME}{tk.id}/{s.slug}", name=f"{tk.id}/{s.slug}", title=s.title,
                description=s.summary or tk.manifest.tagline, mime_type=SKILL_MIME,
            )
            for tk, s in _skills(runtime, await anyio.to_thread.run_sync(only_toolkits))
        ]
        for tk in await anyio.to_thread.run_sync(skill_toolkits, None):
            if skill_md(tk) is not None:
                res.append(types.Resource(
                    uri=f"{SKILL_SCHEME}{tk.id}/{SKILL_MD}", name=tk.id, title=f"{tk.id} (Agent Skill)",
                    description=tk.manifest.tagline or None, mime_type=SKILL_MD_MIME))
        for owner in sorted(await anyio.to_thread.run_sync(provider.act_skills)):
            res.append(types.Resource(
                uri=f"{SKILL_SCHEME}{owner}/{ACT_SKILL_SLUG}", name=f"{owner}/{ACT_SKILL_SLUG}",
                title=f"{owner}: the component's own act:skill", mime_type=ACT_SKILL_MIME,
                description="Agent instructions embedded in the component (act:skill custom section).",
            ))
        return types.ListResourcesResult(resources=res)

    def _verified(uri: str, tk: Any) -> Any:
        # A skill's text goes to a model: its did:web signer is resolved and its files verified
        # (the listing's offline look stops before hashing them). Off the event loop: it may fetch.
        from wbcore_runtime.trust import verdict as trust

        why = trust.unavailable_reason(tk, runtime, resolve_web=True)
        if why:
            raise MCPError(INVALID_PARAMS, f"{uri}: toolkit {tk.id} is unavailable: {why}")
        return tk

    def _read_skill(uri: str) -> tuple[Any, str, str]:
        if not uri.startswith(SKILL_SCHEME) or uri.count("/") != 3:
            raise MCPError(INVALID_PARAMS,
                           f"unknown resource {uri!r}; skills are {SKILL_SCHEME}<toolkit>/<slug>")
        tk_id, slug = uri[len(SKILL_SCHEME):].split("/", 1)
        scope = only_toolkits()
        if scope is not None and tk_id not in scope:
            raise MCPError(INVALID_PARAMS, f"unknown resource {uri!r}")
        from wbcore_runtime.contract.errors import WbError
        from wbcore_runtime.trust import verdict as trust

        try:
            tk = runtime.toolkit(tk_id)
            return tk, slug, trust.skill_text(tk, runtime, slug)  # one verdict; the bytes it covers
        except WbError as exc:
            raise MCPError(INVALID_PARAMS, f"{uri}: {exc.message}") from None

    def skill_toolkits(toolkit: str | None) -> list[Any]:
        # The toolkits whose skills are served (available, within --only), in id order.
        scope = only_toolkits()
        seen: dict[str, Any] = {}
        for tk, _ in _skills(runtime, scope if toolkit is None
                             else [toolkit] if scope is None or toolkit in scope else []):
            seen.setdefault(tk.id, tk)
        return list(seen.values())

    def skill_of(uri: str) -> dict[str, Any]:
        # skills/get: the entry for skill://<toolkit>/SKILL.md, else -32602.
        if uri.startswith(SKILL_SCHEME) and uri.endswith("/" + SKILL_MD) and uri.count("/") == 3:
            tk_id = uri[len(SKILL_SCHEME):-len(SKILL_MD) - 1]
            for tk in skill_toolkits(tk_id):
                entry = skill_entry(tk)
                if entry is not None:
                    return entry
        raise MCPError(INVALID_PARAMS,
                       f"unknown skill {uri!r}; skills are {SKILL_SCHEME}<toolkit>/{SKILL_MD} (skills/list)")

    async def read_resource(ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        if uri.startswith(SKILL_SCHEME) and uri.endswith("/" + SKILL_MD):
            await anyio.to_thread.run_sync(skill_of, uri)  # unknown or unavailable: -32602 with the reason
            tk = await anyio.to_thread.run_sync(_verified, uri,
                                                runtime.toolkit(uri[len(SKILL_SCHEME):-len(SKILL_MD) - 1]))
            return types.ReadResourceResult(
                contents=[types.TextResourceContents(uri=uri, mime_type=SKILL_MD_MIME,
                                                     text=skill_md(tk) or "")])
        if uri.startswith(SKILL_SCHEME) and uri.endswith("/" + ACT_SKILL_SLUG):
            owner = uri[len(SKILL_SCHEME):-len(ACT_SKILL_SLUG) - 1]
            embedded = provider.act_skills().get(owner)
            if embedded is not None:
                return types.ReadResourceResult(
                    contents=[types.TextResourceContents(uri=uri, mime_type=ACT_SKILL_MIME, text=embedded)])
        _, _, text = await anyio.to_thread.run_sync(_read_skill, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=SKILL_MIME, text=text)])

    server = _Server(
        SERVER_NAME,
        version=_version(),
        instructions=(
            "Sandboxed WebAssembly toolkits. Tools are named <toolkit>.<tool>; read a toolkit's skills "
            "(resources skill://<toolkit>/<slug>, start with overview) before using its tools. "
            f"Use {SEARCH_TOOL} to find tools by keyword."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )

    SkillsListParams, SkillsGetParams, SkillsListResult, SkillsGetResult = skills_models()

    async def skills_list(ctx: Any, params: Any) -> Any:
        toolkits = await anyio.to_thread.run_sync(skill_toolkits, None)
        entries = [e for e in (skill_entry(tk) for tk in toolkits) if e is not None]
        return SkillsListResult(skills=entries)

    async def skills_get(ctx: Any, params: Any) -> Any:
        return SkillsGetResult(skill=await anyio.to_thread.run_sync(skill_of, params.uri))

    server.add_request_handler("skills/list", SkillsListParams, skills_list)
    server.add_request_handler("skills/get", SkillsGetParams, skills_get)
    server.extensions[SKILLS_EXTENSION] = {}  # declared in initialize: capabilities.extensions
    server.middleware.append(_declare_extensions)
    server.wb_provider = provider  # type: ignore[attr-defined]
    server.wb_answer = answer  # type: ignore[attr-defined]  # the lean paths' entry (wbcore_mcp.fastpath)
    server.wb_search_tool = search_tool  # type: ignore[attr-defined]
    if warm:
        threading.Thread(target=warm_components, args=(provider,), name="wbcore-mcp-warm",
                         daemon=True).start()
    return server


def warm_components(provider: Any) -> int:
    """Build the tool list now: this loads every component the server offers (compiling
    it once, else deserializing the cached form), so neither the first ``tools/list`` nor
    the first call pays a compile that can outlast a client's timeout."""
    from wbcore_runtime.contract.errors import WbError

    try:
        return sum(1 for t in provider.tools().values() if t.kind == "component")
    except WbError:
        return 0


def _version() -> str:
    from wbcore_runtime import __version__

    return __version__


def build_all(server: Any, *, out: Any = None) -> list[tuple[str, str | None]]:
    """Build every listed but unbuilt toolkit now (``wbx mcp serve --build``), each step on
    ``out`` (stderr) as ``wbx mcp: building <toolkit>: [stage] detail``."""
    out = out or sys.stderr
    t0 = time.monotonic()

    def say(tk: str, stage: str, detail: str) -> None:
        print(f"wbx mcp: building {tk} ({time.monotonic() - t0:.0f} s): [{stage}] {detail}", file=out,
              flush=True)

    done = server.wb_provider.build_all(progress=say)
    for tk, err in done:
        print(f"wbx mcp: {tk}: {'built' if err is None else 'not built: ' + err}", file=out, flush=True)
    return done


async def serve_stdio(runtime: Runtime, *, build: bool = False, lean: bool = True, **kw: Any) -> None:
    """Serve over stdin/stdout; ``lean``: ``tools/call`` takes the lean path, else every message
    goes to the SDK's server; both read and write through ``wbcore_mcp.fastpath``'s bounded wire."""
    from wbcore_mcp import fastpath

    server = build_server(runtime, warm=True, **kw)
    if build:
        await anyio_to_thread(build_all, server)
    await fastpath.serve_stdio(server, lean_calls=lean)


def loop_options() -> dict[str, Any]:
    """anyio's asyncio options: uvloop when installed (a cheaper wake-up per message)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


async def anyio_to_thread(fn: Any, *args: Any) -> Any:
    import anyio

    return await anyio.to_thread.run_sync(fn, *args)


def http_app(server: Any, *, http: HttpServer, host: str, path: str = "/mcp", token: str | None = None,
             allow_hosts: Iterable[str] = (), lean: bool = True, limits: ServerLimits | None = None) -> Any:
    """The ASGI app of ``server`` over streamable HTTP, guarded (``wbcore_mcp.http_guard``):
    Host/Origin checked on every bind address, and the bearer token when one is set; the SDK's
    session cap and idle expiry (:data:`MAX_SESSIONS`, :data:`SESSION_IDLE_S`), and its
    standalone SSE streams (``GET``) capped per client and in all (``http.stream_gate``, the
    HTTP server's: ``wbcore_runtime.contract.http_server``)."""
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

    from wbcore_mcp import http_guard

    security = http_guard.security_settings(host, allow_hosts)
    app = server.streamable_http_app(streamable_http_path=path, host=host, transport_security=security,
                                     max_sessions=MAX_SESSIONS, session_idle_timeout=SESSION_IDLE_S)
    if lean:
        from wbcore_mcp.fastpath import LeanHTTP

        app = LeanHTTP(app, server, path=path, security=security, max_body=DEFAULT_MAX_REQUEST_BODY_SIZE)
    app = http.stream_gate(app, limits or ServerLimits(),
                           is_stream=lambda scope: scope["method"] == "GET" and scope["path"] == path)
    token = http_guard.check_token(token)
    return http_guard.BearerAuth(app, token) if token else app


def serve_http(runtime: Runtime, *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
               ready: threading.Event | None = None, token: str | None = None,
               allow_hosts: Iterable[str] = (), build: bool = False, lean: bool = True, **kw: Any) -> None:
    """Serve streamable HTTP on ``host:port`` (loopback by default) until interrupted."""
    from wbcore_mcp import http_guard

    token = http_guard.check_token(token)
    http = http_server.service(runtime)  # none installed: NotFound naming wbcore-http-server
    # a busy port fails here, before any banner or build
    sock = http.listen(host, port, what="wbx mcp serve")
    port = sock.getsockname()[1]  # --port 0 took a free one: the banner names it
    limits = ServerLimits()
    server = build_server(runtime, warm=True, **kw)
    app = http_app(server, http=http, host=host, path=path, token=token, allow_hosts=allow_hosts, lean=lean,
                   limits=limits)
    if build:
        build_all(server)
    # a whole request within its deadline, connections per client and in all, the idle timeout
    http.raise_nofile(limits)
    uv = http.server(app, host=host, port=port, limits=limits, ready=ready, log_level="warning",
                     lifespan="on")
    warn = http_guard.warning(host, token)
    if warn:
        print(warn, file=sys.stderr, flush=True)
    print(f"wbx mcp: serving streamable HTTP on http://{host}:{port}{path}"
          f"{' (bearer token required)' if token else ''}", file=sys.stderr, flush=True)
    uv.run(sockets=[sock])
