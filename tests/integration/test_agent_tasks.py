"""A short run of the task benchmark (bench/agent_tasks.py) against a real model server:
it asserts that the loop worked — a real tool call whose result reached the model, the
run ended, ``_steps.jsonl`` complete — never a success rate."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("wbcore_agent")
pytest.importorskip("wbcore_llm_openai")

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ["wasmtime", "sources", "brokers-state", "brokers-build", "agent", "act", "llm-openai"]


def _bench():
    spec = importlib.util.spec_from_file_location("agent_tasks", ROOT / "bench" / "agent_tasks.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_a_short_benchmark_run_drives_real_tool_calls(make_runtime, real_llm_env, tmp_path):
    bench = _bench()
    task = next(t for t in bench.TASKS if t.id == "b64-decode")
    rt = make_runtime(plugins=PLUGINS, env=dict(real_llm_env), roots=[ROOT / "toolkits"])
    assert bench.build(rt, "b64", {}) is None
    r = bench.run_task(rt, task, tmp_path, max_steps=2, first_tool=True)
    rows = r["rows"]
    steps, end = rows[:-1], rows[-1]
    # _steps.jsonl is complete: one line per step, numbered 1..n, then the end event with the total usage
    assert [s["step"] for s in steps] == list(range(1, r["steps"] + 1)) and r["steps"] >= 1
    assert end["event"] == r["status"] and end["event"] in ("done", "max-steps"), end
    assert end["usage"]["input_tokens"] > 0
    # a real tool call ran (step 1 names it) and its result went back to the model in a later request
    call, res = steps[0]["tool_calls"][0], steps[0]["results"][0]
    assert call["name"] == "b64__b64" and res["id"] == call["id"] and res["text"], steps[0]
    assert len(steps) >= 2 and steps[1]["usage"]["input_tokens"] > steps[0]["usage"]["input_tokens"]
    assert r["tool_calls"] >= 1 and r["wall_s"] > 0
