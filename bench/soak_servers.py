"""Soak: ``wbx engine serve`` and ``wbx mcp serve --http`` under hostile load, loopback only.

    python bench/soak_servers.py                 # 3 runs of 20 s, 300 silent + 300 SSE; prints a table
    python bench/soak_servers.py --runs 1 --seconds 10 --json

Each run starts both servers as child processes on a fresh ``$WB_HOME`` whose audit trail
is ``--trail-mb`` MiB, then:

1. measures ``GET /v1/audit?tail=1``'s peak RSS growth on that trail (the kernel's peak
   counter is reset first: ``/proc/<pid>/clear_refs`` 5);
2. holds ``--silent`` half-open sockets (connected, nothing sent) and ``--sse`` idle SSE
   subscribers (``/v1/audit/events``) against the engine, spread over several loopback
   source addresses (the per-client caps allow 256 connections and 128 streams each), and
   a slice of both against MCP (its SSE streams are sessions' ``GET`` streams);
3. times the first authenticated call made while they are held;
4. for ``--seconds``: good clients (engine ``GET /v1/toolkits``, MCP ``ping`` in a session)
   measure latency while other threads send slowloris drips, 1,000-deep JSON, bodies over
   the caps and garbage to both servers;
5. reads both servers' RSS at the end.

Every loop is bounded in count and time and every address is on 127.0.0.0/8.
``tests/integration/test_server_soak.py`` runs one short run and asserts the ceilings in
:data:`CEILINGS` (docs/benchmarks.md "Servers under hostile load").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: Generous bounds the soak test asserts (not targets: the figures are in docs/benchmarks.md).
CEILINGS = {"first_call_s": 1.0, "p99_ms": 1000.0, "engine_rss_mb": 250.0, "mcp_rss_mb": 300.0,
            "audit_tail_growth_mb": 20.0}
TOKEN = "soak-token-" + "0123456789abcdef"
SERVE = [sys.executable, "-c", "from wbcore_cli.app import run; run()"]
DEEP = b"[" * 1000 + b"]" * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def write_trail(home: Path, mb: int) -> int:
    """An audit trail of ``mb`` MiB in the Dock's line format (seq 1..N); returns N."""
    from wbcore_runtime.dispatch import audit

    d = home / "audit"
    d.mkdir(parents=True, exist_ok=True)
    entry = (time.time(), "soak/trail", "kv", "get", "sha256:" + "0" * 64, "allowed", None, None,
             "http://example.test/some/path", 42, 0.08)
    prev, seq, size = audit.GENESIS, 0, 0
    with (d / audit.LOG_NAME).open("wb") as fh:
        while size < mb << 20:
            chunk = []
            for _ in range(2000):
                seq += 1
                line, prev = audit._encode(seq, prev, entry)
                chunk.append(line)
            data = b"".join(chunk)
            fh.write(data)
            size += len(data)
    (d / audit.HEAD_NAME).write_bytes(f"{seq} {prev}".ljust(95).encode() + b"\n")
    return seq


def _start(args: list[str], env: dict[str, str], port: int,
           host: str = "127.0.0.1") -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*SERVE, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("server did not start: "
                                   f"{proc.stderr.read().decode()[-2000:] if proc.stderr else ''}") from None
            time.sleep(0.1)


def _hold(port: int, sources: list[str], n: int, request: bytes | None) -> list[socket.socket]:
    """``n`` connections from the ``sources`` in turn; each sends ``request`` (if any)."""
    out = []
    for i in range(n):
        s = socket.socket()
        s.settimeout(10)
        s.bind((sources[i % len(sources)], 0))
        s.connect(("127.0.0.1", port))
        if request is not None:
            s.sendall(request)
        out.append(s)
    return out


def _raw(port: int, data: bytes, source: str, drip: float = 0.0, deadline: float = 10.0) -> bytes:
    """Send ``data`` (a byte every ``drip`` seconds when set), return what came back."""
    with socket.socket() as s:
        s.settimeout(deadline)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        try:
            if drip:
                end = time.monotonic() + deadline
                for b in data:
                    if time.monotonic() > end:
                        break
                    s.send(bytes([b]))
                    time.sleep(drip)
            else:
                s.sendall(data)
            return s.recv(256)
        except OSError:
            return b""


def _post(path: str, host: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body


def _hostile(stop: threading.Event, engine: int, mcp: int, seen: dict[str, int]) -> None:
    """Slowloris drips, deep and oversized JSON and garbage, in turn, until ``stop``."""
    kinds = [
        ("engine-deep", lambda: _raw(engine, _post("/v1/calls/x", "127.0.0.1", DEEP), "127.0.0.40")),
        ("engine-huge",
         lambda: _raw(engine, _post("/v1/calls/x", "127.0.0.1", b"[" + b"1," * (3 << 20) + b"1]"),
                                     "127.0.0.40")),
        ("engine-garbage", lambda: _raw(engine, b"\x16\x03\x01garbage\r\n\r\n", "127.0.0.40")),
        ("engine-drip",
         lambda: _raw(engine, b"GET /v1/toolkits HTTP/1.1\r\nHost: 127.0.0.1\r\n", "127.0.0.41",
                                     drip=0.5, deadline=3)),
        ("mcp-deep", lambda: _raw(mcp, _post("/mcp", "127.0.0.1", DEEP), "127.0.0.40")),
        ("mcp-huge",
         lambda: _raw(mcp, _post("/mcp", "127.0.0.1", b'{"x":"' + b"a" * (5 << 20) + b'"}'), "127.0.0.40")),
        ("mcp-garbage", lambda: _raw(mcp, b"NOT HTTP AT ALL\r\n\r\n", "127.0.0.40")),
    ]
    i = 0
    while not stop.is_set() and i < 10_000:
        name, fn = kinds[i % len(kinds)]
        head = fn()[:12].decode(errors="replace")
        seen[f"{name} {head}"] = seen.get(f"{name} {head}", 0) + 1
        i += 1


def _mcp_session(c: Any, url: str) -> dict[str, str]:
    head = {"accept": "application/json, text/event-stream", "content-type": "application/json",
            "authorization": f"Bearer {TOKEN}"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}}}
    r = c.post(url, json=init, headers=head)
    r.raise_for_status()
    s = {**head, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=s)
    return s


def soak(*, seconds: float = 20.0, silent: int = 300, sse: int = 300, trail_mb: int = 100) -> dict[str, Any]:
    import httpx

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * (silent + sse) + 512
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    home = Path(tempfile.mkdtemp(prefix="wb-soak-"))
    (home / "toolkits-root").mkdir()
    trail = write_trail(home / "home", trail_mb)
    env = {**os.environ, "WB_HOME": str(home / "home"), "WB_TOOLKITS_ROOT": str(home / "toolkits-root"),
           "WB_ENGINE_TOKEN": TOKEN, "WB_MCP_TOKEN": TOKEN}
    ep, mp = _free_port(), _free_port()
    engine = _start(["engine", "serve", "--port", str(ep)], env, ep)
    mcp = _start(["mcp", "serve", "--http", "--port", str(mp)], env, mp)
    held: list[socket.socket] = []
    out: dict[str, Any] = {"trail_entries": trail, "silent": silent, "sse": sse, "seconds": seconds,
                           "load_before": os.getloadavg()[0]}
    try:
        eu, mu = f"http://127.0.0.1:{ep}", f"http://127.0.0.1:{mp}/mcp"
        auth = {"authorization": f"Bearer {TOKEN}"}
        with httpx.Client(timeout=30) as c:
            c.get(eu + "/v1/toolkits", headers=auth).raise_for_status()
            c.get(eu + "/v1/audit", headers=auth, params={"tail": 1}).raise_for_status()  # warm the route
            before = _status(engine.pid)["VmRSS"]
            Path(f"/proc/{engine.pid}/clear_refs").write_text("5")  # the peak counter starts from now
            r = c.get(eu + "/v1/audit", headers=auth, params={"tail": 1})
            assert r.json()["entries"][-1]["seq"] == trail, r.text[:200]
            out["audit_tail_growth_mb"] = (_status(engine.pid)["VmHWM"] - before) / 2**20
            out["engine_rss_start_mb"] = before / 2**20
            out["mcp_rss_start_mb"] = _status(mcp.pid)["VmRSS"] / 2**20
            sessions = [_mcp_session(c, mu) for _ in range(3)]

        sse_req = (f"GET /v1/audit/events?after={trail}&wait=600 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {TOKEN}\r\n\r\n").encode()
        held += _hold(ep, [f"127.0.0.{10 + i}" for i in range(4)], silent, None)
        held += _hold(ep, [f"127.0.0.{20 + i}" for i in range(4)], sse, sse_req)
        for s in held[-sse:]:
            head = s.recv(64)
            assert head.startswith(b"HTTP/1.1 200"), head
        held += _hold(mp, [f"127.0.0.{30 + i}" for i in range(2)], silent // 3, None)
        for sess in sessions:  # each session's standalone SSE stream, held
            held += _hold(mp, ["127.0.0.35"], 1,
                          ("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                           + "".join(f"{k}: {v}\r\n" for k, v in sess.items() if k != "content-type")
                           + "\r\n").encode())
        with httpx.Client(timeout=30) as c:
            t0 = time.monotonic()
            c.get(eu + "/v1/toolkits", headers=auth).raise_for_status()
            out["first_call_s"] = time.monotonic() - t0

            stop, seen = threading.Event(), {}
            hostile = [threading.Thread(target=_hostile, args=(stop, ep, mp, seen), daemon=True)
                       for _ in range(2)]
            for t in hostile:
                t.start()
            lat_e: list[float] = []
            lat_m: list[float] = []
            end = time.monotonic() + seconds
            n = 0
            while time.monotonic() < end and n < 100_000:
                t = time.perf_counter()
                c.get(eu + "/v1/toolkits", headers=auth).raise_for_status()
                lat_e.append(time.perf_counter() - t)
                t = time.perf_counter()
                r = c.post(mu, json={"jsonrpc": "2.0", "id": n + 10, "method": "ping"},
                           headers=sessions[n % 3])
                r.raise_for_status()
                lat_m.append(time.perf_counter() - t)
                n += 1
            stop.set()
            for t in hostile:
                t.join(15)
        for name, lat in (("engine", lat_e), ("mcp", lat_m)):
            lat.sort()
            out[f"{name}_calls"] = len(lat)
            out[f"{name}_p50_ms"] = statistics.median(lat) * 1000
            out[f"{name}_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
            out[f"{name}_max_ms"] = lat[-1] * 1000
        out["p99_ms"] = max(out["engine_p99_ms"], out["mcp_p99_ms"])
        out["engine_rss_mb"] = _status(engine.pid)["VmRSS"] / 2**20
        out["mcp_rss_mb"] = _status(mcp.pid)["VmRSS"] / 2**20
        out["hostile"] = dict(sorted(seen.items()))
        out["load_after"] = os.getloadavg()[0]
        out["alive"] = engine.poll() is None and mcp.poll() is None
        return out
    finally:
        for s in held:
            s.close()
        for p in (engine, mcp):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--silent", type=int, default=300)
    ap.add_argument("--sse", type=int, default=300)
    ap.add_argument("--trail-mb", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    runs = [soak(seconds=a.seconds, silent=a.silent, sse=a.sse, trail_mb=a.trail_mb)
            for _ in range(max(1, min(a.runs, 10)))]
    if a.json:
        print(json.dumps(runs, indent=1))
        return
    keys = ["first_call_s", "engine_p50_ms", "engine_p99_ms", "engine_max_ms", "mcp_p50_ms", "mcp_p99_ms",
            "mcp_max_ms", "engine_rss_start_mb", "engine_rss_mb", "mcp_rss_start_mb", "mcp_rss_mb",
            "audit_tail_growth_mb"]
    print(f"runs={len(runs)} seconds={a.seconds:g} silent={a.silent} sse={a.sse} trail={a.trail_mb} MiB "
          f"load {runs[0]['load_before']:.1f} -> {runs[-1]['load_after']:.1f}; "
          f"calls per run: engine {[r['engine_calls'] for r in runs]}, mcp {[r['mcp_calls'] for r in runs]}")
    print("| figure | median | min | max | ceiling |\n| --- | --- | --- | --- | --- |")
    for k in keys:
        vals = [r[k] for r in runs]
        ceiling = CEILINGS.get(k, CEILINGS.get("p99_ms") if k.endswith("p99_ms") else None)
        print(f"| {k} | {statistics.median(vals):.2f} | {min(vals):.2f} | {max(vals):.2f} | "
              f"{ceiling if ceiling else ''} |")
    print("hostile requests (kind, answer head: count):", json.dumps(runs[-1]["hostile"]))


if __name__ == "__main__":
    main()
