"""The engine and MCP under hostile load (issue 24 item 7): silent sockets, idle SSE
subscribers, slowloris drips, deep and oversized JSON and garbage, while a client measures
latency. One short run of ``bench/soak_servers.py``; the ceilings are generous bounds
(``CEILINGS``), the figures live in docs/benchmarks.md. Loopback only, bounded in time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("wbcore_engine")
pytest.importorskip("wbcore_mcp")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "soak_servers.py"


@pytest.mark.slow
def test_engine_and_mcp_hold_their_bounds_under_hostile_load() -> None:
    spec = importlib.util.spec_from_file_location("soak_servers", BENCH)
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    got = soak.soak(seconds=10, silent=300, sse=300, trail_mb=100)
    ceilings = soak.CEILINGS
    assert got["alive"], got
    assert got["first_call_s"] < ceilings["first_call_s"], got  # with 300 silent + 300 SSE held
    assert got["p99_ms"] < ceilings["p99_ms"], got
    assert got["engine_rss_mb"] < ceilings["engine_rss_mb"], got
    assert got["mcp_rss_mb"] < ceilings["mcp_rss_mb"], got
    assert got["audit_tail_growth_mb"] < ceilings["audit_tail_growth_mb"], got  # tail=1 on a 100 MiB trail
    hostile = got["hostile"]
    assert hostile.get("engine-deep HTTP/1.1 400") and hostile.get("mcp-deep HTTP/1.1 400"), hostile
    assert not [k for k in hostile if " 500" in k], hostile  # no parser error ever became a 500
