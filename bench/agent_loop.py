"""The agent loop's own cost per step, against scripted model servers on loopback.

A 40-step run (39 ``vfs_write`` calls, then ``done``) per wire format; the figure that
matters is the loop's overhead per step: wall time minus the model calls and the tool
calls (the run's state written to its VFS, the step appended and fsynced to
``_steps.jsonl``, the tool list rebuilt). SDK import and client set-up are outside it.

    python bench/agent_loop.py
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from wbcore_runtime.runtime import Runtime
from wbcore_testing.scripted_llm import ScriptedLlm, reply, tool
from wbcore_testing.fixtures import write_toolkit

STEPS = 40


def one(fmt: str) -> str:
    with tempfile.TemporaryDirectory() as tmp, ScriptedLlm(fmt) as llm:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "tk").mkdir()
        write_toolkit(root / "tk", "notes")
        agent = root / "a.org"
        agent.write_text(f"* A :agent:\n  :PROPERTIES:\n  :ID: a\n  :MODEL: {fmt}:m\n  :TOOLKITS: notes\n  "
                         ":END:\n** System prompt\nHi.\n")
        rt = Runtime.open(plugins=["brokers-state", "agent", "act", "llm-openai", "llm-anthropic"],
                          home=root / "home", roots=[root / "tk"],
                          env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": "k"})
        llm.script = [reply(tool("vfs_write", path=f"f{i}.txt", content="x" * 100)) for i in range(STEPS - 1)]
        llm.script.append(reply(tool("done", result="ok")))
        rt.llm(f"{fmt}:m")
        t0 = time.perf_counter()
        rec = rt.agent(agent, "go", max_steps=STEPS)
        wall = time.perf_counter() - t0
        rows = [json.loads(x) for x in (rec.workdir / "_steps.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "event" not in r]
        model = sorted(r["llm_ms"] for r in rows)
        tools = sorted(r["results"][0]["ms"] for r in rows)
        over = (wall * 1000 - sum(model) - sum(tools)) / len(rows)
        return (f"| {fmt} | {rec.status} | {len(rows)} | {wall / len(rows) * 1000:.1f} | "
                f"{model[len(model) // 2]:.1f} | {tools[len(tools) // 2]:.2f} | {over:.1f} |")


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| format | status | steps | ms/step | model call median ms | tool median ms | loop overhead "
          "ms/step |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for fmt in ("openai", "anthropic"):
        print(one(fmt))


if __name__ == "__main__":
    main()
