"""MCP call benchmarks (not named mcp.py: the script folder would shadow the SDK).

    python bench/mcp_calls.py              # ~1 min on 2 loaded cores; builds b64 in a temp $WB_HOME
    WB_BENCH_N=2000 WB_BENCH_SECONDS=5 python bench/mcp_calls.py
    python bench/mcp_calls.py --profile    # also: cProfile of the stdio server over N calls (top 20)

One small command, ``b64.b64`` of 5 bytes, everywhere:

1. the **in-process floor**: the ACT provider's ``call_json`` (what every surface runs);
2. **stdio**: ``wbx mcp serve`` as a child process, a minimal JSON-RPC line client doing
   the handshake and then N sequential ``tools/call``; lean path (default) and
   ``--sdk-only`` (every message through the SDK's transport and runner);
3. **streamable HTTP**: ``wbx mcp serve --http`` on loopback, 1 and 8 concurrent
   clients (each its own session, keep-alive connection, calls back to back for a fixed
   time): calls/s and ms per call; lean path with a raw asyncio client, SDK-only with
   httpx2 (the SDK's own HTTP client, which also parses the SSE replies).

Each row gives wall time per call, the server process's CPU per call (from
``/proc/<pid>/stat``), and the client's CPU beside it; the load average is printed
before and after. Budgets (issue 12): stdio adds ≤ 0.5 ms to the in-process call on an
idle core; HTTP ≥ 1,000 calls/s with 8 clients on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, summary, table, timed

N = int(os.environ.get("WB_BENCH_N", "1000"))
SECONDS = float(os.environ.get("WB_BENCH_SECONDS", "4"))
SERVE = [sys.executable, "-c", "from wbcore_cli.app import run; run()", "mcp", "serve"]
CALL = {"name": "b64.b64", "arguments": {"stdin": "hello"}}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def ms(x: float) -> str:
    return f"{x * 1e3:.3f} ms"


# --- stdio ------------------------------------------------------------------------------


def stdio_run(env: dict[str, str], *, lean: bool, n: int, profile: str | None = None) -> dict[str, float]:
    cmd = [*SERVE, *([] if lean else ["--sdk-only"])]
    if profile:  # cProfile runs a script, not -c
        script = Path(profile).with_suffix(".py")
        script.write_text("from wbcore_cli.app import run\nrun()\n")
        cmd = [sys.executable, "-m", "cProfile", "-o", profile, str(script), "mcp", "serve",
               *([] if lean else ["--sdk-only"])]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, bufsize=0)
    rid = 0

    def rpc(method: str, params: dict[str, Any] | None = None, *, note: bool = False) -> Any:
        nonlocal rid
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not note:
            rid += 1
            msg["id"] = rid
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        if note:
            return None
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            got = json.loads(line)
            if got.get("id") == rid:
                if "error" in got:
                    raise RuntimeError(got["error"])
                return got["result"]

    rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "0"}})
    rpc("notifications/initialized", note=True)
    rpc("tools/list")
    for _ in range(50):
        assert rpc("tools/call", CALL)["content"][0]["text"].strip() == "aGVsbG8="
    samples = []
    s0, c0 = cpu_of(proc.pid), own_cpu()
    for _ in range(n):
        t = time.perf_counter()
        rpc("tools/call", CALL)
        samples.append(time.perf_counter() - t)
    s1, c1 = cpu_of(proc.pid), own_cpu()
    proc.stdin.close()
    proc.wait(timeout=30)
    out = summary(samples)
    out.update(server_cpu=(s1 - s0) / n, client_cpu=(c1 - c0) / n, rate=n / sum(samples))
    return out


# --- streamable HTTP -----------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_server(env: dict[str, str], *, lean: bool) -> tuple[subprocess.Popen[bytes], int]:
    import socket

    port = _free_port()
    proc = subprocess.Popen([*SERVE, "--http", "--port", str(port), *([] if lean else ["--sdk-only"])],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("HTTP server did not start") from None
            time.sleep(0.1)


HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def handshake(port: int) -> str:
    """A session id after initialize + notifications/initialized (httpx2, SSE-aware)."""
    import httpx2

    url = f"http://127.0.0.1:{port}/mcp"
    with httpx2.Client(timeout=30) as c:
        r = c.post(url, headers=HEADERS, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}})
        sid = r.headers["mcp-session-id"]
        session = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        c.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        c.post(url, headers=session, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    return sid


async def raw_client(port: int, sid: str, stop: float, lat: list[float]) -> int:
    """Back-to-back tools/call POSTs on one keep-alive connection; parses JSON replies."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = 0
    while time.perf_counter() < stop:
        body = json.dumps({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": CALL}).encode()
        head = (f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                "accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
                f"mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        t = time.perf_counter()
        writer.write(head + body)
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = await reader.readexactly(length)
        lat.append(time.perf_counter() - t)
        if not status.startswith(b"HTTP/1.1 200") or b"aGVsbG8=" not in data:
            raise RuntimeError(f"unexpected reply: {status!r} {data[:200]!r}")
        n += 1
    writer.close()
    return n


async def sdk_client(port: int, sid: str, stop: float, lat: list[float]) -> int:
    import httpx2

    n = 0
    async with httpx2.AsyncClient(timeout=30) as c:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            r = await c.post(f"http://127.0.0.1:{port}/mcp",
                             json={"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                                                                  "params": CALL},
                             headers={**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"})
            lat.append(time.perf_counter() - t)
            if r.status_code != 200 or "aGVsbG8=" not in r.text:
                raise RuntimeError(f"unexpected reply: {r.status_code} {r.text[:200]!r}")
            n += 1
    return n


def http_run(env: dict[str, str], *, lean: bool, clients: int) -> dict[str, float]:
    proc, port = http_server(env, lean=lean)
    try:
        sids = [handshake(port) for _ in range(clients)]
        client = raw_client if lean else sdk_client

        async def load(seconds: float) -> tuple[int, list[float]]:
            stop = time.perf_counter() + seconds
            lat: list[float] = []
            counts = await asyncio.gather(*(client(port, sid, stop, lat) for sid in sids))
            return sum(counts), lat

        asyncio.run(load(0.5))  # warm-up
        s0, c0, t0 = cpu_of(proc.pid), own_cpu(), time.perf_counter()
        n, lat = asyncio.run(load(SECONDS))
        wall = time.perf_counter() - t0
        s1, c1 = cpu_of(proc.pid), own_cpu()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    out = summary(lat)
    out.update(rate=n / wall, server_cpu=(s1 - s0) / n, client_cpu=(c1 - c0) / n, calls=n)
    return out


def main() -> int:
    from wbcore_runtime.contract import tools
    from wbcore_runtime.build.builder import build
    from wbcore_runtime.runtime import Runtime

    home = Path(os.environ.get("WB_BENCH_HOME") or tempfile.mkdtemp(prefix="wb-bench-mcp-"))
    rt = Runtime.open(home=home, roots=[ROOT / "toolkits"])
    build(rt, "b64")
    env = {"WB_HOME": str(home), "WB_TOOLKITS_ROOT": str(ROOT / "toolkits"),
           "PATH": os.environ.get("PATH", "")}
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs; "
          f"N={N}, HTTP {SECONDS:.0f} s per row")

    provider = tools.service(rt).provider()
    c0 = own_cpu()
    floor = summary(timed(lambda: provider.call_json("b64.b64", {"stdin": "hello"}), N))
    floor_cpu = (own_cpu() - c0) / (N + 50)

    stdio = {lean: stdio_run(env, lean=lean, n=N) for lean in (True, False)}
    http = {(lean, c): http_run(env, lean=lean, clients=c) for lean in (True, False) for c in (1, 8)}
    load1 = os.getloadavg()

    rows = [["in-process provider.call_json (floor)", ms(floor["median"]), ms(floor["p90"]), "-",
             ms(floor_cpu), "-"]]
    for lean in (True, False):
        r = stdio[lean]
        rows.append([f"stdio tools/call, {'lean' if lean else 'SDK only'}", ms(r["median"]), ms(r["p90"]),
                     f"{r['rate']:,.0f}", ms(r["server_cpu"]), ms(r["client_cpu"])])
    for (lean, c), r in http.items():
        rows.append([f"HTTP tools/call, {c} client{'s' if c > 1 else ''}, {'lean' if lean else 'SDK only'}",
                     ms(r["median"]), ms(r["p90"]), f"{r['rate']:,.0f}", ms(r["server_cpu"]),
                     ms(r["client_cpu"])])
    table(rows, ["b64 of 5 bytes", "median", "p90", "calls/s", "server CPU/call", "client CPU/call"])
    gap = stdio[True]["median"] - floor["median"]
    print(f"\nstdio adds {gap * 1e3:.3f} ms to the in-process call (budget ≤ 0.5 ms on an idle core: "
          f"{'met' if gap <= 0.0005 else 'NOT met'} here); SDK-only adds "
          f"{(stdio[False]['median'] - floor['median']) * 1e3:.3f} ms")
    rate = http[(True, 8)]["rate"]
    print(f"HTTP, 8 clients: {rate:,.0f} calls/s (budget ≥ 1,000 on 2 cores: "
          f"{'met' if rate >= 1000 else 'NOT met'} here)")
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")

    if "--profile" in sys.argv:
        import pstats

        prof = str(home / "stdio.prof")
        stdio_run(env, lean=True, n=N, profile=prof)
        print("\ncProfile of the stdio server (lean) over", N, "calls, by internal time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
