"""The engine console's page loads with 1,000 toolkits and a 100,000-line audit trail.

    .venv/bin/python bench/console.py [--toolkits 1000] [--audit 100000] [--runs 30]

A real engine on loopback (uvicorn, every bound in force), a console login over HTTP, then
each page fetched ``--runs`` times (after a warm-up) by a keep-alive client; the floor is
measured in the same run: a bare API call (``GET /v1/audit?tail=1``, bearer token) and the
console's static script. Target (issue 27): every page under 300 ms. Pages are bounded
reads: one page of toolkits (50 rows, each verified: a fourth of them third-party, signed)
is built, not 1,000; the audit trail is read
backwards a block at a time, 50 lines a page, a filtered page looking at no more than
20,000 lines.
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from wbcore_testing.fixtures import write_toolkit

TOKEN = "bench-console-token-0123456789"


def generate(root: Path, n: int) -> None:
    """``n`` toolkits; every fourth third-party and signed (its page row verifies the signature)."""
    from wbcore_runtime.trust import identity, signing

    key = identity.Identity.from_seed(bytes(32))
    for i in range(n):
        third = i % 4 == 0
        d = write_toolkit(root, f"tk{i:04d}", exec="command", caps="vfs kv", tagline=f"generated toolkit {i}",
                          trust="third-party" if third else "first-party",
                          extra={"CLI_BIN": f"tk{i}", "BUILD_LANG": "c", "BUILD_SRC": "path:src"})
        if third:
            signing.sign(d, key)


def fill_audit(rt: object, n: int) -> float:
    audit = rt.dock.audit  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    outcomes = ("allowed", "allowed", "allowed", "denied")
    for i in range(n):
        audit.record(principal=f"dev/tk{i % 1000:04d}", cap=("net", "kv", "vfs", "fs")[i % 4], op="call",
                     args_digest="", outcome=outcomes[i % 4], target=f"tk{i % 1000:04d}", ms=0.1)
    audit.flush()
    return time.perf_counter() - t0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ms(samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(len(s) * 0.95))]
    return (f"median {statistics.median(s) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
            f"max {s[-1] * 1000:7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toolkits", type=int, default=1000)
    ap.add_argument("--audit", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()

    from wbcore_engine import app as _app
    from wbcore_runtime.contract import http_server
    from wbcore_runtime.runtime import Runtime

    with tempfile.TemporaryDirectory(prefix="wb-bench-console-") as tmp:
        root, home = Path(tmp) / "toolkits", Path(tmp) / "home"
        t0 = time.perf_counter()
        generate(root, args.toolkits)
        print(f"generated {args.toolkits} toolkits in {time.perf_counter() - t0:.1f} s")
        rt = Runtime.open(plugins=["engine", "audit-trail", "http-server"], home=home, roots=[root],
                          cwd=Path(tmp))
        print(f"wrote {args.audit} audit lines in {fill_audit(rt, args.audit):.1f} s "
              f"({sum(p.stat().st_size for p in rt.dock.audit.segments()) / 1e6:.1f} MB)")
        limits = _app.EngineLimits()
        port = _port()
        served = http_server.service(rt)
        asgi = _app.build(rt, token=TOKEN, served=served, limits=limits)
        uv = served.server(asgi, host="127.0.0.1", port=port, limits=limits.server, log_level="warning",
                           lifespan="off")
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        while not uv.started:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                page = c.get("/console/login")
                login_csrf = re.search(r'name="login_csrf" value="([^"]*)"',
                                       page.text).group(1)  # type: ignore[union-attr]
                assert c.post("/console/login",
                              data={"login_csrf": login_csrf, "token": TOKEN}).status_code == 303
                first = c.get("/console/audit").text
                older = re.search(r'before=(\d+)" rel="next"', first)
                mid = args.audit // 2
                targets = {
                    "floor: GET /v1/audit?tail=1 (API, bearer)": ("/v1/audit?tail=1",
                                                                  {"authorization": f"Bearer {TOKEN}"}),
                    "floor: GET /console/static/console.js": ("/console/static/console.js", {}),
                    "toolkits, page 1 of 20": ("/console/toolkits", {}),
                    "toolkits, page 20 of 20": ("/console/toolkits?page=20", {}),
                    "toolkits, filtered (q=tk09)": ("/console/toolkits?q=tk09", {}),
                    "toolkit detail (verify ✓/✗)": ("/console/toolkits/tk0500", {}),
                    "audit, newest 50": ("/console/audit", {}),
                    "audit, next page": (f"/console/audit?before={older.group(1) if older else mid}", {}),
                    f"audit, page at seq {mid}": (f"/console/audit?before={mid}", {}),
                    "audit, filtered toolkit+cap+outcome":
                        ("/console/audit?toolkit=tk0007&cap=fs&outcome=denied", {}),
                    "audit, filter matching nothing (scan cap)": ("/console/audit?toolkit=nosuch", {}),
                    "sessions": ("/console/sessions", {}),
                    "pipelines": ("/console/pipelines", {}),
                }
                worst = 0.0
                print(f"\n{args.runs} loads each (after 3 warm-ups), keep-alive client, 2-core shared "
                      "machine:")
                for name, (path, headers) in targets.items():
                    for _ in range(3):
                        r = c.get(path, headers=headers)
                        assert r.status_code == 200, (path, r.status_code, r.text[:200])
                    samples = []
                    for _ in range(args.runs):
                        t = time.perf_counter()
                        r = c.get(path, headers=headers)
                        samples.append(time.perf_counter() - t)
                        assert r.status_code == 200
                    if not name.startswith("floor"):
                        worst = max(worst, statistics.median(samples))
                    print(f"  {name:45s} {ms(samples)}")
                print(f"\nslowest page median: {worst * 1000:.1f} ms (target < 300 ms): "
                      f"{'ok' if worst < 0.3 else 'OVER'}")
                return 0 if worst < 0.3 else 1
        finally:
            uv.should_exit = True
            thread.join(timeout=10)
            rt.close() if hasattr(rt, "close") else None


if __name__ == "__main__":
    sys.exit(main())
