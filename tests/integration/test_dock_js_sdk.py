"""wbcore_runtime/sdk/wb_dock.js against the real Dock, over a stand-in bridge (node on stdio)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from wbcore_audit_trail import reader
from wbcore_runtime.contract.calls import Principal

DEMO = Path(__file__).resolve().parents[1] / "data" / "js" / "bridge_demo.mjs"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_shim_speaks_the_dock_abi(make_runtime):
    pytest.importorskip("wbcore_brokers_state")
    rt = make_runtime(plugins=["brokers-state"])
    ctx = rt.dock.context(principal=Principal("t", "jsguest"), caps={"kv"})
    proc = subprocess.Popen(["node", str(DEMO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    result = None
    try:
        for line in proc.stdout:
            verb, _, rest = line.strip().partition(" ")
            if verb == "CALL":
                cap, _, hexreq = rest.partition(" ")
                status, body = rt.dock.call_raw(ctx, cap, bytes.fromhex(hexreq))
                proc.stdin.write(f"{status} {body.hex()}\n")
                proc.stdin.flush()
            elif verb == "DONE":
                result = json.loads(rest)
                break
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    assert result is not None, "the JS guest did not finish"
    assert result["got"] == "hello from js"
    assert result["missing"]["kind"] == "not-found" and result["missing"]["exit"] == 66
    assert result["missing"]["isDockError"] and "absent" in result["missing"]["message"]
    assert result["denied"] == {"kind": "capability-denied", "reason": "not-granted"}
    assert result["roundtrip"] is True
    ops = [(e["cap"], e["op"], e["outcome"]) for e in reader.entries(rt.dock.audit)]
    assert ops == [("kv", "put", "allowed"), ("kv", "get", "allowed"), ("kv", "get", "denied"),
                   ("net", "fetch", "denied")]
