"""MCP and component benchmarks (not named mcp.py: the script folder would shadow the SDK).

    python bench/mcp_calls.py          # builds b64 and text-tools in a temp $WB_HOME first (~20 s)

1. A small command (b64 of 5 bytes): in-process ``Runtime.call``, the same call through
   the ACT provider (``wbx call``'s path), and an MCP ``tools/call`` over stdio from the
   official SDK client to ``wbx mcp serve`` (a separate process). Target: MCP within
   2 ms of the in-process call.
2. A Python component (text-tools.count, 18 MB componentize-py component), once its
   compiled form is cached: in-process typed call (fresh store + instantiate per call)
   and over MCP stdio.
3. Loading that component: cold (compile + serialize into the artifact store) vs cached
   (deserialize the stored compiled form, as a second process does).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, summary, table, timed, us  # noqa: E402

N = int(os.environ.get("WB_BENCH_N", "300"))


def main() -> int:
    import anyio

    from wbcore.builder import build
    from wbcore.runtime import Runtime

    home = Path(os.environ.get("WB_BENCH_HOME") or tempfile.mkdtemp(prefix="wb-bench-mcp-"))
    rt = Runtime.open(home=home, roots=[ROOT / "toolkits"])
    t0 = time.perf_counter()
    for ident in ("b64", "text-tools"):
        build(rt, ident)
    print(f"built b64 and text-tools in {time.perf_counter() - t0:.1f} s ({home})")

    from wbcore.act.provider import ToolkitProvider
    from wb_wasmtime import component as comp

    # --- 3. component load: cold compile vs cached deserialize ---------------------
    sha = rt.registry.get("component", "text-tools").sha256
    comp.components.clear()
    rt.artifacts.remove_compiled(sha)
    t = time.perf_counter()
    comp.ComponentRunner(rt).load(sha)
    cold = time.perf_counter() - t
    cached = []
    for _ in range(5):
        comp.components.clear()
        t = time.perf_counter()
        comp.ComponentRunner(rt).load(sha)
        cached.append(time.perf_counter() - t)
    size = rt.artifacts.path(sha).stat().st_size

    # --- 1 + 2 in process ------------------------------------------------------------
    provider = ToolkitProvider(rt)
    direct = summary(timed(lambda: rt.call("b64", [], b"hello"), N))
    via_provider = summary(timed(lambda: provider.call_json("b64.b64", {"stdin": "hello"}), N))
    comp_direct = summary(timed(lambda: provider.call_json("text-tools.count", {"text": "one two\nthree"}), N // 3, warm=10))

    # --- 1 + 2 over MCP stdio ---------------------------------------------------------
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {"WB_HOME": str(home), "WB_TOOLKITS_ROOT": str(ROOT / "toolkits"), "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(
        command=sys.executable, args=["-c", "from wbcore.cli.app import run; run()", "mcp", "serve"], env=env)
    results: dict[str, dict[str, float]] = {}

    async def over_mcp() -> None:
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                for name, args, n in (("b64.b64", {"stdin": "hello"}, N), ("text-tools.count", {"text": "one two\nthree"}, N // 3)):
                    for _ in range(10):
                        await session.call_tool(name, args)
                    samples = []
                    for _ in range(n):
                        t = time.perf_counter()
                        r = await session.call_tool(name, args)
                        samples.append(time.perf_counter() - t)
                        assert not r.is_error, r
                    results[name] = summary(samples)

    anyio.run(over_mcp)

    # The same SDK client and server over the SDK's in-memory streams: what the server
    # itself adds, without the stdio pipes and process scheduling.
    from mcp.shared.memory import create_client_server_memory_streams

    from wb_mcp.server import build_server

    server = build_server(rt)

    async def in_memory() -> None:
        async with create_client_server_memory_streams() as ((cr, cw), (sr, sw)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: server.run(sr, sw, server.create_initialization_options()))
                async with ClientSession(cr, cw) as session:
                    await session.initialize()
                    await session.list_tools()
                    for _ in range(20):
                        await session.call_tool("b64.b64", {"stdin": "hello"})
                    samples = []
                    for _ in range(N):
                        t = time.perf_counter()
                        await session.call_tool("b64.b64", {"stdin": "hello"})
                        samples.append(time.perf_counter() - t)
                    results["memory"] = summary(samples)
                    samples = []
                    for _ in range(N):
                        t = time.perf_counter()
                        await session.send_ping()
                        samples.append(time.perf_counter() - t)
                    results["ping"] = summary(samples)
                tg.cancel_scope.cancel()

    anyio.run(in_memory)

    rows = [
        ["b64 (5 B) in-process Runtime.call", us(direct["median"]), us(direct["p90"])],
        ["b64 via the ACT provider (wbx call path)", us(via_provider["median"]), us(via_provider["p90"])],
        ["b64 MCP tools/call over stdio", us(results["b64.b64"]["median"]), us(results["b64.b64"]["p90"])],
        ["b64 MCP tools/call, in-memory streams", us(results["memory"]["median"]), us(results["memory"]["p90"])],
        ["MCP ping, in-memory streams (SDK floor)", us(results["ping"]["median"]), us(results["ping"]["p90"])],
        ["text-tools.count in-process (cached)", us(comp_direct["median"]), us(comp_direct["p90"])],
        ["text-tools.count MCP over stdio", us(results["text-tools.count"]["median"]), us(results["text-tools.count"]["p90"])],
    ]
    table(rows, ["call", "median", "p90"])
    gap = results["b64.b64"]["median"] - direct["median"]
    print(f"\nMCP stdio overhead over in-process: {gap * 1e3:.2f} ms (target ≤ 2 ms: {'met' if gap <= 0.002 else 'NOT met'}); "
          f"server-side (in-memory streams): {(results['memory']['median'] - direct['median']) * 1e3:.2f} ms")
    print(f"component load ({size / 1e6:.1f} MB): cold compile {cold:.2f} s, cached deserialize "
          f"{min(cached) * 1e3:.1f} ms (median {sorted(cached)[2] * 1e3:.1f} ms) → {cold / min(cached):,.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
