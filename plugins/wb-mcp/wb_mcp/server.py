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
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wbcore.runtime import Runtime

SERVER_NAME = "wbcore"
SKILL_SCHEME = "skill://"
SKILL_MIME = "text/org"
#: A component's embedded ``act:skill`` section (markdown), served beside its skills/ files.
ACT_SKILL_SLUG = "act-skill"
ACT_SKILL_MIME = "text/markdown"
SEARCH_TOOL = "search_tools"
PROGRESS_EVERY_S = 1.0
MAX_SEARCH_RESULTS = 50
#: ``_meta`` key a client may set on ``tools/call`` to shorten the deadline (milliseconds).
TIMEOUT_META = "wbcore/timeout-ms"

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "words to look for in tool names, descriptions and skills"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _mcp_tool(tool: Any) -> Any:
    import mcp_types as types

    d = tool.definition
    ann = types.ToolAnnotations(
        title=tool.name,
        read_only_hint=d.read_only,
        destructive_hint=False if d.read_only else d.destructive,
        idempotent_hint=d.idempotent,
        open_world_hint=bool(tool.caps & {"net", "browse", "llm", "tcp", "udp", "tls"}),
    )
    out_schema = None
    if tool.output_schema is not None:
        out_schema = {"type": "object", "properties": {"result": dict(tool.output_schema)}, "required": ["result"]}
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
    from wbcore import trust

    found = runtime.discover()
    wanted = set(toolkits) if toolkits is not None else None
    out = []
    for tk_id in sorted(found.toolkits):
        if wanted is not None and tk_id not in wanted:
            continue
        tk = found.toolkits[tk_id]
        if trust.unavailable_reason(tk, runtime):
            continue  # a tampered or unpinned toolkit's skills are not served (wbx toolkit list says why)
        out.extend((tk, s) for s in tk.skills)
    return out


def skills_models() -> tuple[type, type, type, type]:
    """Params and results of ``skills/list`` and ``skills/get`` (the skills extension)."""
    import mcp_types as types
    from pydantic import Field

    class SkillsListParams(types.RequestParams):
        toolkit: str | None = None

    class SkillsGetParams(types.RequestParams):
        toolkit: str
        skill: str

    class SkillsListResult(types.Result):
        skills: list[dict[str, Any]]

    class SkillsGetResult(types.Result):
        toolkit: str
        name: str
        uri: str
        mime_type: str = Field(default=SKILL_MIME, alias="mimeType")
        text: str

    return SkillsListParams, SkillsGetParams, SkillsListResult, SkillsGetResult


def build_server(runtime: Runtime, *, only: Iterable[str] | None = None, search_tool: bool = True,
                 timeout: float | None = None, warm: bool = False) -> Any:
    """The low-level ``mcp`` Server over ``runtime`` (not yet running)."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from wbcore.act.model import Content
    from wbcore.act.provider import ToolkitProvider

    provider = ToolkitProvider(runtime, only=only)
    only_names = None if only is None else frozenset(only)

    def only_toolkits() -> set[str] | None:
        # The toolkits the chosen tools belong to (names given as toolkit ids count too).
        if only_names is None:
            return None
        return {t.toolkit for t in provider.tools().values() if t.toolkit} | set(only_names)

    async def tools_ready() -> dict[str, Any]:
        # The first build of the list may compile components: keep the event loop free.
        return await anyio.to_thread.run_sync(provider.tools)

    async def list_tools(ctx: Any, params: Any) -> Any:
        await anyio.to_thread.run_sync(provider.refresh_if_changed)  # a toolkit built while serving shows up
        tools = [_mcp_tool(t) for t in (await tools_ready()).values()]
        if search_tool:
            tools.append(types.Tool(
                name=SEARCH_TOOL,
                description="Find tools by keywords when many are installed; returns names, descriptions and input schemas.",
                input_schema=SEARCH_SCHEMA,
                annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
            ))
        return types.ListToolsResult(tools=tools)

    def _error(text: str) -> Any:
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)

    async def call_tool(ctx: Any, params: Any) -> Any:
        name = params.name
        args = params.arguments or {}
        if search_tool and name == SEARCH_TOOL:
            query = args.get("query")
            limit = args.get("limit", 20)
            if not isinstance(query, str) or not isinstance(limit, int) or isinstance(limit, bool):
                return _error("search_tools: 'query' must be a string and 'limit' an integer")
            hits = search(provider, query, max(1, min(limit, MAX_SEARCH_RESULTS)))
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(hits, indent=1))],
                                        structured_content={"tools": hits})
        known_tools = await tools_ready()
        if name not in known_tools and not (provider.refresh_if_changed() and name in provider.tools()):
            known = ", ".join(list(provider.tools())[:20])
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}; known: {known}")

        deadline = timeout
        meta = params.meta if isinstance(params.meta, dict) else (
            params.meta.model_dump(by_alias=True) if params.meta is not None else {})
        ms = (meta or {}).get(TIMEOUT_META)
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
                                                      f"{name}: running for {time.monotonic() - started:.0f} s")

        def run() -> Any:
            return provider.call_json(name, args, cancel=cancel, timeout=deadline)

        try:
            if (meta or {}).get("progress_token", (meta or {}).get("progressToken")) is None:
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

        content: list[Any] = []
        for ev in outcome.events:
            if isinstance(ev, Content):
                v = ev.part.value()
                if isinstance(v, bytes):
                    import base64

                    content.append(types.TextContent(text="base64:" + base64.b64encode(v).decode()))
                else:
                    content.append(types.TextContent(text=v if isinstance(v, str) else json.dumps(v)))
        err = outcome.error
        if err is not None:
            content.append(types.TextContent(text=f"{err.kind_name}: {err.text}"))
            return types.CallToolResult(content=content, is_error=True)
        structured = None
        if provider.tool(name).output_schema is not None:
            structured = {"result": outcome.structured}
        return types.CallToolResult(content=content or [types.TextContent(text="")], structured_content=structured)

    async def list_resources(ctx: Any, params: Any) -> Any:
        res = [
            types.Resource(
                uri=f"{SKILL_SCHEME}{tk.id}/{s.slug}", name=f"{tk.id}/{s.slug}", title=s.title,
                description=s.summary or tk.manifest.tagline, mime_type=SKILL_MIME,
            )
            for tk, s in _skills(runtime, await anyio.to_thread.run_sync(only_toolkits))
        ]
        for owner in sorted(await anyio.to_thread.run_sync(provider.act_skills)):
            res.append(types.Resource(
                uri=f"{SKILL_SCHEME}{owner}/{ACT_SKILL_SLUG}", name=f"{owner}/{ACT_SKILL_SLUG}",
                title=f"{owner}: the component's own act:skill", mime_type=ACT_SKILL_MIME,
                description="Agent instructions embedded in the component (act:skill custom section).",
            ))
        return types.ListResourcesResult(resources=res)

    def _read_skill(uri: str) -> tuple[Any, str, str]:
        if not uri.startswith(SKILL_SCHEME) or uri.count("/") != 3:
            raise MCPError(INVALID_PARAMS, f"unknown resource {uri!r}; skills are {SKILL_SCHEME}<toolkit>/<slug>")
        tk_id, slug = uri[len(SKILL_SCHEME):].split("/", 1)
        scope = only_toolkits()
        if scope is not None and tk_id not in scope:
            raise MCPError(INVALID_PARAMS, f"unknown resource {uri!r}")
        from wbcore.errors import WbError

        from wbcore import trust

        try:
            tk = runtime.toolkit(tk_id)
            why = trust.unavailable_reason(tk, runtime)
            if why:
                raise MCPError(INVALID_PARAMS, f"{uri}: toolkit {tk_id} is unavailable: {why}")
            return tk, slug, tk.skill_text(slug)
        except WbError as exc:
            raise MCPError(INVALID_PARAMS, f"{uri}: {exc.message}") from None

    async def read_resource(ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        if uri.startswith(SKILL_SCHEME) and uri.endswith("/" + ACT_SKILL_SLUG):
            owner = uri[len(SKILL_SCHEME):-len(ACT_SKILL_SLUG) - 1]
            embedded = provider.act_skills().get(owner)
            if embedded is not None:
                return types.ReadResourceResult(
                    contents=[types.TextResourceContents(uri=uri, mime_type=ACT_SKILL_MIME, text=embedded)])
        _, _, text = _read_skill(uri)
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=SKILL_MIME, text=text)])

    server = Server(
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
        allowed = await anyio.to_thread.run_sync(only_toolkits)
        wanted = [params.toolkit] if params.toolkit else None
        if wanted and allowed is not None:
            wanted = [w for w in wanted if w in allowed]
        scope = wanted if wanted is not None else allowed
        items = [{"toolkit": tk.id, "name": s.slug, "title": s.title, "description": s.summary,
                  "uri": f"{SKILL_SCHEME}{tk.id}/{s.slug}"} for tk, s in _skills(runtime, scope)]
        return SkillsListResult(skills=items)

    async def skills_get(ctx: Any, params: Any) -> Any:
        uri = f"{SKILL_SCHEME}{params.toolkit}/{params.skill}"
        tk, slug, text = _read_skill(uri)
        return SkillsGetResult(toolkit=tk.id, name=slug, uri=uri, mime_type=SKILL_MIME, text=text)

    server.add_request_handler("skills/list", SkillsListParams, skills_list)
    server.add_request_handler("skills/get", SkillsGetParams, skills_get)
    server.wb_provider = provider  # type: ignore[attr-defined]
    if warm:
        threading.Thread(target=warm_components, args=(provider,), name="wb-mcp-warm", daemon=True).start()
    return server


def warm_components(provider: Any) -> int:
    """Build the tool list now: this loads every component the server offers (compiling
    it once, else deserializing the cached form), so neither the first ``tools/list`` nor
    the first call pays a compile that can outlast a client's timeout."""
    from wbcore.errors import WbError

    try:
        return sum(1 for t in provider.tools().values() if t.kind == "component")
    except WbError:
        return 0


def _version() -> str:
    from wbcore import __version__

    return __version__


async def serve_stdio(runtime: Runtime, **kw: Any) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(runtime, warm=True, **kw)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(runtime: Runtime, *, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
               ready: threading.Event | None = None, **kw: Any) -> None:
    """Serve streamable HTTP on ``host:port`` (loopback by default) until interrupted."""
    import uvicorn

    server = build_server(runtime, warm=True, **kw)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(f"wbx mcp: serving streamable HTTP on http://{host}:{port}{path}", file=sys.stderr, flush=True)
    if ready is not None:
        orig = uv.startup

        async def startup(sockets: Any = None) -> None:
            await orig(sockets)
            ready.set()

        uv.startup = startup  # type: ignore[method-assign]
    uv.run()
