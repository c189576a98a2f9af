"""A task benchmark for the agent loop against a real model: small tasks whose answers need
a shipped toolkit's output, each checked by its exact answer.

Each task grants the toolkits it needs and nothing else, gives the model a task and an
input made here, and computes the exact answer here in Python (never typed in by hand):
a task succeeds when the run ends ``done`` and that answer occurs in its result. Per task
and in total it prints success, steps, tool calls (and how many returned ok), tokens
(``~`` marks estimated counts) and wall time, with the model and the server named.

The model is the local one (``wbcore-llm-local``: llama.cpp's server via llama-cpp-python,
SmolLM2-135M-Instruct), started on loopback and stopped at the end, unless
``WB_LLM_BASE_URL`` names another OpenAI-compatible endpoint (then ``WB_LLM_MODEL`` and
``WB_LLM_API_KEY`` are read too). Nothing is sent anywhere else.

    python bench/agent_tasks.py                       # every task, the model chooses its tools
    python bench/agent_tasks.py --first-tool          # step 1 names the task's first tool (:TOOL_CHOICE:)
    python bench/agent_tasks.py --only b64-encode --max-steps 2

A toolkit that cannot be built here makes its tasks "unavailable" (said, and counted apart).
"""

from __future__ import annotations

import argparse
import base64
import collections
import csv
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ["wasmtime", "sources", "brokers-state", "brokers-build", "agent", "act", "llm-openai",
           "lane-rust", "lane-go", "lane-zig", "lane-js", "process"]


@dataclass(frozen=True)
class Task:
    id: str
    toolkits: tuple[str, ...]
    prompt: str
    answer: str
    #: the tool a solution calls first (``--first-tool`` names it for step 1)
    first: str
    #: a further check of the steps (e.g. a skill read before the tool), beside the answer
    check: Callable[[list[dict[str, Any]]], bool] | None = None


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


WORDS = "the cat sat on the mat and the dog sat on the log while the bird sang"
LOG = "\n".join(["GET /a 200", "GET /b 500", "GET /a 200", "POST /c 200", "GET /a 200", "GET /b 500"]) + "\n"
ERRLOG = "\n".join(["INFO start", "ERROR disk full", "INFO retry", "ERROR disk full", "WARN slow",
                    "ERROR timeout"])
PRICES = "item,price\napple,3\npear,7\nplum,5\nfig,11\n"
ROWS = [{"name": "ada", "team": "core"}, {"name": "bob", "team": "lanes"},
        {"name": "cy", "team": "core", "lead": True}]


def _max_price() -> str:
    return str(max(int(r["price"]) for r in csv.DictReader(io.StringIO(PRICES))))


def _top_word() -> str:
    return collections.Counter(WORDS.split()).most_common(1)[0][0]


def _skill_first(rows: list[dict[str, Any]]) -> bool:
    """A ``wb`` skill read happened before the first b64 call."""
    names = [c["name"] + ":" + str(c["arguments"].get("op", ""))
             for r in rows for c in r.get("tool_calls") or ()]
    first_b64 = next((i for i, n in enumerate(names) if n.startswith("b64__")), None)
    return first_b64 is not None and any(n in ("wb:skill", "wb:show") for n in names[:first_b64])


TASKS = [
    Task("b64-encode", ("b64",),
         "Encode the text 'wbcore agent' as base64 with the b64 tool. Answer with the base64 text.",
         _b64("wbcore agent"), "b64__b64"),
    Task("b64-encode-2", ("b64",), "What is the base64 encoding of 'tool calls'? Use the b64 tool.",
         _b64("tool calls"), "b64__b64"),
    Task("b64-decode", ("b64",),
         f"Decode this base64 with the b64 tool (argument 'decode'): {_b64('hello world')}",
         "hello world", "b64__b64"),
    Task("b64-decode-2", ("b64",), f"The b64 tool decodes base64 when given the argument 'decode'. Decode: "
         f"{_b64('small model')}", "small model", "b64__b64"),
    Task("freq-top-word", ("freq",),
         f"Which word occurs most often in this text? Use the freq tool (words).\n{WORDS}",
         _top_word(), "freq__freq"),
    Task("freq-top-line", ("freq",),
         f"Which line repeats most often in this log? Use the freq tool (lines).\n{LOG}",
         collections.Counter(LOG.splitlines()).most_common(1)[0][0], "freq__freq"),
    Task("freq-count", ("freq",),
         f"How many times does the line 'GET /a 200' occur in this log? Use freq (lines).\n{LOG}",
         str(LOG.splitlines().count("GET /a 200")), "freq__freq"),
    Task("lines-count", ("lines",),
         f"How many lines contain ERROR? Use the lines tool (grep-count ERROR).\n{ERRLOG}",
         str(sum("ERROR" in x for x in ERRLOG.splitlines())), "lines__lines"),
    Task("lines-stats", ("lines",),
         f"How many lines does this text have? Use the lines tool (stats).\n{ERRLOG}",
         str(len(ERRLOG.splitlines())), "lines__lines"),
    Task("csv-max", ("csv",),
         f"What is the highest price in this CSV? Use the csv tool (stats price).\n{PRICES}",
         _max_price(), "csv__csv"),
    Task("csv-rows", ("csv",),
         f"How many data rows does this CSV have? Use the csv tool (columns).\n{PRICES}",
         str(len(PRICES.splitlines()) - 1), "csv__csv"),
    Task("table-keys", ("table",), "Which field is present in only one record? Use the table tool (keys).\n"
         + json.dumps(ROWS), "lead", "table__table"),
    Task("chain-b64-csv", ("b64", "csv"),
         "This base64 text is a CSV. Decode it with the b64 tool, then find the "
         f"highest price with the csv tool: {_b64(PRICES)}", _max_price(), "b64__b64"),
    Task("chain-b64-freq", ("b64", "freq"),
         "Decode this base64 with the b64 tool, then find the most frequent word "
         f"with the freq tool: {_b64(WORDS)}", _top_word(), "b64__b64"),
    Task("skill-then-b64", ("b64",),
         "First read the b64 toolkit's 'encode' skill with the wb tool (op skill), then "
         "encode 'read first' with the b64 tool.", _b64("read first"), "wb", _skill_first),
]

AGENT = """* Bench :agent:
  :PROPERTIES:
  :ID: bench-{id}
  :TOOLKITS: {toolkits}
{choice}  :END:
** System prompt
You solve the task with the tools you are given, then call done with the answer as its result.
"""


def build(rt: Any, toolkit: str, cache: dict[str, str | None]) -> str | None:
    """Build ``toolkit`` once; ``None`` when it is ready, else why it is not."""
    if toolkit not in cache:
        from wbcore_runtime.build import builder

        try:
            builder.build(rt, toolkit)
            cache[toolkit] = None
        except Exception as exc:  # noqa: BLE001 - a lane missing here makes the task unavailable, said
            cache[toolkit] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return cache[toolkit]


def run_task(rt: Any, task: Task, workdir: Path, *, max_steps: int, first_tool: bool,
             tool_timeout: float = 60.0) -> dict[str, Any]:
    """One task, one run: what the table prints (and what the test asserts on)."""
    choice = f"  :TOOL_CHOICE: {task.first} auto\n" if first_tool else ""
    agent = workdir / f"{task.id}.org"
    agent.write_text(AGENT.format(id=task.id, toolkits=" ".join(task.toolkits), choice=choice))
    t0 = time.perf_counter()
    rec = rt.agent(agent, task.prompt, max_steps=max_steps, tool_timeout=tool_timeout,
                   workdir=workdir / task.id)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (rec.workdir / "_steps.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "event" not in r]
    calls = [c for r in steps for c in r.get("tool_calls") or ()]
    results = [x for r in steps for x in r.get("results") or ()]
    ok = rec.status == "done" and rec.result is not None and task.answer in rec.result
    if ok and task.check is not None:
        ok = task.check(steps)
    return {"task": task.id, "status": rec.status, "success": ok, "steps": rec.steps,
            "tool_calls": len(calls),
            "tools_ok": sum(1 for x in results if x["ok"]), "tools": [c["name"] for c in calls],
            "tokens_in": rec.usage.input_tokens, "tokens_out": rec.usage.output_tokens,
            "estimated": rec.usage.estimated, "wall_s": round(wall, 1),
            "result": (rec.result or rec.error or "")[:80], "workdir": str(rec.workdir), "rows": rows}


def open_runtime(env: dict[str, str], home: Path) -> Any:
    from wbcore_runtime.runtime import Runtime

    keep = {k: os.environ[k] for k in ("PATH", "HOME", "WB_ZIG_CACHE", "WB_GO_CACHE") if k in os.environ}
    return Runtime.open(plugins=PLUGINS, home=home, roots=[ROOT / "toolkits"], env={**keep, **env})


def table(results: list[dict[str, Any]]) -> None:
    print("| task | status | success | steps | tool calls (ok) | tools | tokens in/out | wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if r["status"] == "unavailable":
            print(f"| {r['task']} | unavailable: {r['result']} | – | – | – | – | – | – |")
            continue
        est = "~" if r["estimated"] else ""
        print(f"| {r['task']} | {r['status']} | {'yes' if r['success'] else 'no'} | {r['steps']} | "
              f"{r['tool_calls']} ({r['tools_ok']}) | {' '.join(r['tools']) or '–'} | "
              f"{est}{r['tokens_in']}/{est}{r['tokens_out']} | {r['wall_s']} |")
    ran = [r for r in results if r["status"] != "unavailable"]
    if ran:
        print(f"| **total** ({len(ran)} run, {len(results) - len(ran)} unavailable) | "
              f"{sum(r['status'] == 'done' for r in ran)} done | {sum(r['success'] for r in ran)}/{len(ran)} "
              f"| {sum(r['steps'] for r in ran)} | {sum(r['tool_calls'] for r in ran)} "
              f"({sum(r['tools_ok'] for r in ran)}) | | {sum(r['tokens_in'] for r in ran)}/"
              f"{sum(r['tokens_out'] for r in ran)} | {sum(r['wall_s'] for r in ran):.1f} "
              f"(median {statistics.median(r['wall_s'] for r in ran):.1f}) |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="task ids (default: all)")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--first-tool", action="store_true",
                    help="name each task's first tool for step 1, then auto")
    ap.add_argument("--json", type=Path, help="also write the per-task records here")
    args = ap.parse_args(argv)
    tasks = [t for t in TASKS if not args.only or t.id in args.only]
    if args.only and len(tasks) != len(args.only):
        print(f"unknown task(s): {sorted(set(args.only) - {t.id for t in TASKS})}; known: "
              f"{[t.id for t in TASKS]}",
              file=sys.stderr)
        return 2
    server = None
    if os.environ.get("WB_LLM_BASE_URL"):
        env = {k: v for k, v in os.environ.items() if k.startswith("WB_LLM_")}
        env.setdefault("WB_LLM_PROVIDER", "openai")
        served = f"{env['WB_LLM_BASE_URL']} (WB_LLM_BASE_URL)"
    else:
        from wbcore_llm_local.server import LocalServer

        server = LocalServer().start()
        env = server.settings()
        served = ("llama.cpp server via llama-cpp-python " + _version("llama_cpp_python")
                  + f" on {server.base_url}")
    try:
        with tempfile.TemporaryDirectory(prefix="wb-agent-tasks-") as tmp:
            rt = open_runtime(env, Path(tmp) / "home")
            print(f"model {env.get('WB_LLM_MODEL')} ({env.get('WB_LLM_PROVIDER')}), server {served}")
            print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cpus, load "
                  f"{os.getloadavg()[0]:.2f} at start; max_steps {args.max_steps}; tool choice "
                  f"{'first tool named, then auto' if args.first_tool else 'the model decides (auto)'}",
                  flush=True)
            built: dict[str, str | None] = {}
            results = []
            for task in tasks:
                why = next((w for w in (build(rt, tk, built) for tk in task.toolkits) if w), None)
                if why:
                    results.append({"task": task.id, "status": "unavailable", "result": why})
                    continue
                r = run_task(rt, task, Path(tmp), max_steps=args.max_steps, first_tool=args.first_tool)
                print(f"  {task.id}: {r['status']}, success {r['success']}, {r['tool_calls']} tool call(s), "
                      f"{r['wall_s']} s", flush=True)
                results.append(r)
            print(f"load {os.getloadavg()[0]:.2f} at end")
            table(results)
            if args.json:
                args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "rows"}
                                                 for r in results],
                                                indent=1))
    finally:
        if server is not None:
            server.stop()
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
