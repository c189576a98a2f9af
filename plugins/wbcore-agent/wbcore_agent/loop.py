"""The agent loop (seed 004 "Agent loop"): call the model → run the tools it asks for →
append the results → loop, until it calls ``done``, stops asking for tools, runs out of
``max_steps``, is cancelled, or the provider fails after its retries.

Every step is appended to ``<workdir>/_steps.jsonl`` (one JSON object per line, the key
redacted) and the run's state (conversation, step count, usage, the toolkits it built)
is written to the run's VFS (instance ``agent-<run id>``, volume ``memory``, path
``agent/state.json``) after every step, so ``resume=<run id>`` continues a crashed run
from its last whole step. Every tool call is bounded (``tool_timeout``, 150 s by
default): an overrun stops the guest (its cancel event) and the model gets a tool error.

The run as a whole is bounded too (docs/agents.md "Bounds"): at most ``max_calls`` tool
calls of one reply run (the rest are answered ``refused`` so the model sees why), the run
has a wall-clock budget (``run_timeout``) that shortens each tool's and each model
request's deadline and refuses calls once it is spent, a call's arguments are capped
(``MAX_ARGUMENT``: an oversize call is a tool error and its arguments are not kept) and so
is the conversation (``MAX_CONVERSATION``, below the VFS's file cap, so the state always
saves). Whatever ends a run, its state is saved.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_agent import tools as _tools
from wbcore_agent.made import MadeToolkits
from wbcore_agent.review import ReviewQueue
from wbcore_agent import definitions as _agents
from wbcore_runtime.contract import telemetry
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout, WbError
from wbcore_runtime.contract.llm import ChatRequest, Message, ToolSpec, ToolUse, Usage, check_tool_choice

MAX_STEPS = 12
SESSION_MAX_STEPS = 40
TOOL_TIMEOUT_S = 150.0
#: Tool calls of one reply that run; the rest are answered "refused" (the model sees why).
MAX_CALLS = 16
MAX_CALLS_LIMIT = 256
#: The wall-clock budget of one run (seconds): model requests and tool calls included.
RUN_TIMEOUT_S = 1800.0
#: One call's arguments as JSON: over this, the call is a tool error and its arguments are dropped.
MAX_ARGUMENT = 1 << 20
#: The conversation as JSON: over this the run ends with an error (the state still fits the
#: VFS's 16 MiB file cap, so it is saved and can be read back).
MAX_CONVERSATION = 8 << 20
STATE_PATH = "agent/state.json"
STATE_VOLUME = "memory"
STEPS_FILE = "_steps.jsonl"
DEFAULT_PROFILE = "network"
RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Run statuses (docs/agents.md): how a run ended.
DONE, MAX_STEPS_REACHED, FAILED, CANCELLED, RUNNING = "done", "max-steps", "error", "cancelled", "running"
#: The run's wall-clock budget ran out.
OUT_OF_TIME = "timeout"


class StepLimit(Timeout):
    """The run used ``max_steps`` steps without calling ``done``."""


class Cancelled(WbError):
    """The run was cancelled (``Session.cancel``)."""


class OutOfTime(Timeout):
    """The run's wall-clock budget (``run_timeout``) is spent."""


@dataclass
class RunRecord:
    """How a run ended: ``status`` is done | max-steps | timeout | error | cancelled."""

    run_id: str
    agent: str
    status: str
    result: str | None
    error: str | None
    steps: int
    usage: Usage
    workdir: Path
    model: str
    provider: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "agent": self.agent, "status": self.status, "result": self.result,
            "error": self.error, "steps": self.steps, "usage": self.usage.as_dict(),
            "workdir": str(self.workdir), "model": self.model, "provider": self.provider,
        }


def find_agent(runtime: Any, spec: Any) -> _agents.AgentDef:
    """An ``AgentDef``, a path to an ``.org`` definition, or an agent id looked up as
    ``agents/<id>.org`` under the working folder and ``$WB_HOME``."""
    if isinstance(spec, _agents.AgentDef):
        return spec
    p = Path(str(spec))
    if p.suffix == ".org" or p.is_file():
        if not p.is_absolute():
            p = Path(runtime.cwd) / p
        if not p.is_file():
            raise NotFound(f"agent definition {spec} does not exist")
        return _agents.load(p)
    where = [Path(runtime.cwd) / "agents", Path(runtime.home) / "agents"]
    for d in where:
        if (d / f"{spec}.org").is_file():
            return _agents.load(d / f"{spec}.org")
    raise NotFound(f"no agent {spec!r}: looked for {', '.join(str(d / f'{spec}.org') for d in where)}")


@dataclass
class Run:
    """One run's host-side state: what the tools reach. Built by :func:`run_agent`."""

    runtime: Any
    agent: _agents.AgentDef
    task: str
    run_id: str
    workdir: Path
    llm: Any
    max_steps: int
    tool_timeout: float
    tenant: str
    max_calls: int
    run_timeout: float
    exec_grant: bool
    profile: str
    caps: frozenset[str]
    review: ReviewQueue
    host_tools: dict[str, _tools.HostTool] = field(default_factory=dict)
    on_step: Callable[[dict[str, Any]], None] | None = None
    on_text: Callable[[str], None] | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event)
    messages: list[Message] = field(default_factory=list)
    step: int = 0
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        #: Set to stop the guest of the tool call running now (a timeout or a cancel).
        self.tool_cancel = threading.Event()
        # its reach (the :TOOLKITS: allowlist, docs/agents.md) rides along into every nested call
        self.principal = Principal(self.tenant, f"agent.{self.agent.id}", self.agent.allowlist())
        self.ctx = self.runtime.dock.context(
            principal=self.principal, caps=self.caps, instance=f"agent-{self.run_id}"
        )
        self.made = MadeToolkits(self)
        self._typed: dict[str, tuple[str, str]] = {}  # model-facing name → (kind, real name)
        self._provider: Any = None
        #: ``time.monotonic()`` instant the run's budget ends (set by :func:`drive`).
        self.deadline = time.monotonic() + self.run_timeout

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def call_timeout(self) -> float:
        """What one tool call may take now: ``tool_timeout``, shortened by the run's budget."""
        return max(0.05, min(self.tool_timeout, self.time_left()))

    @property
    def toolkits(self) -> tuple[str, ...]:
        return self.agent.toolkits

    # --- brokered services (through the Dock's cadence) ---------------------------

    def dock(self, cap: str, op: str, args: Mapping[str, Any]) -> Any:
        ctx = self.ctx.child(deadline=time.monotonic() + self.call_timeout())
        return self.runtime.dock.call(ctx, cap, op, dict(args))

    def vfs_read(self, path: str, volume: str = "workspace") -> bytes:
        return bytes(self.dock("vfs", "read", {"path": path, "volume": volume})["data"])

    def vfs_write(self, path: str, data: bytes, volume: str = "workspace") -> None:
        self.dock("vfs", "write", {"path": path, "data": data, "volume": volume})

    def vfs_list(self, prefix: str = "", volume: str = "workspace") -> list[dict[str, Any]]:
        return list(self.dock("vfs", "list", {"prefix": prefix, "volume": volume})["entries"])

    def call_command(self, name: str, argv: list[str], stdin: bytes) -> Any:
        return self.runtime.call(name, argv, stdin, principal=self.principal, timeout=self.call_timeout(),
                                 cancel=self.tool_cancel)

    # --- tools --------------------------------------------------------------------

    def provider(self) -> Any:
        from wbcore_runtime.contract import tools as _contract_tools

        if self._provider is None:
            # the runtime's tool provider (wbcore-act); NotFound naming it when none is installed
            self._provider = _contract_tools.service(self.runtime).provider(
                principal=self.principal, only=self.toolkits
            )
        return self._provider

    def tool_specs(self) -> list[ToolSpec]:
        """The tools offered this step, each under its own name: two that would reach the model
        under one name (the model would call one and the other would run) stop the run, naming both."""
        specs = [_tools.SPECS[n] for n in _tools.base_names(self)]
        owners = {n: f"the loop's own tool {n}" for n in _tools.base_names(self)}
        owners.update((n, f"the host tool {n}") for n in self.host_tools)
        typed: dict[str, tuple[str, str]] = {}

        def offer(name: str, owner: str) -> None:
            if name in owners:
                raise InvalidArgs(
                    f"two tools would reach the model as {name!r}: {owners[name]} and {owner}; it could call "
                    "one and run the other. Leave one out of the agent's :TOOLKITS: or rename it"
                )
            owners[name] = owner

        if self.toolkits:
            for tool in self.provider().tools().values():
                name = _tools.tool_name(tool.name)
                offer(name, f"the tool {tool.name}")
                typed[name] = ("toolkit", tool.name)
                specs.append(
                    ToolSpec(name, tool.description, dict(tool.definition.input_schema or {"type": "object"}))
                )
        for made in self.made.list():
            for bin_name, schema, desc in made.tools(self.runtime):
                name = _tools.tool_name(f"local.{made.id}.{bin_name}")
                offer(name, f"the session toolkit tool {made.id}.{bin_name}")
                typed[name] = ("local", f"{made.id}\0{bin_name}")
                specs.append(ToolSpec(name, desc, schema))
        self._typed = typed
        specs += [t.spec for t in self.host_tools.values()]
        return specs

    def _invoke(self, use: ToolUse) -> str:
        args = dict(use.arguments)
        if "_invalid_json" in args:
            raise InvalidArgs(
                f"{use.name}: the arguments are not a JSON object: {args['_invalid_json'][:200]}"
            )
        if use.name in self.host_tools:
            return self.host_tools[use.name].handler(self, args)
        typed = self._typed.get(use.name)
        if typed is not None and typed[0] == "toolkit":
            out = self.provider().call_json(
                typed[1], args, cancel=self.tool_cancel, timeout=self.call_timeout()
            )
            if out.error is not None:
                raise WbError(f"{out.error.kind_name}: {out.error.text}\n{_tools.clip(out.text(), 4000)}")
            return out.text()
        if typed is not None and typed[0] == "local":
            ident, bin_name = typed[1].split("\0")
            return self.made.call(ident, bin_name, args)
        if use.name in _tools.base_names(self):
            return _tools.HANDLERS[use.name](self, args)
        raise NotFound(f"no tool {use.name!r}; offered: {', '.join(s.name for s in self.tool_specs())}")

    def run_tool(self, use: ToolUse) -> tuple[bool, str, float]:
        """One tool call, bounded by ``tool_timeout`` (and the run's budget) while it runs:
        ``(ok, text, ms)``."""
        box: dict[str, Any] = {}
        t0 = time.monotonic()
        self.tool_cancel = threading.Event()
        limit = self.call_timeout()

        def work() -> None:
            try:
                box["text"] = self._invoke(use)
            except WbError as exc:
                box["error"] = f"{exc.name}: {exc.message}"
            except Exception as exc:  # noqa: BLE001 - a tool bug is the model's error text, never the run's end
                box["error"] = f"internal: {use.name} failed ({type(exc).__name__}: {exc})"

        # in a copy of this context: the tool's call and broker spans nest under the step's
        worker = threading.Thread(
            target=contextvars.copy_context().run, args=(work,), name=f"agent-tool-{use.name}", daemon=True
        )
        worker.start()
        deadline = t0 + limit
        while worker.is_alive() and (left := deadline - time.monotonic()) > 0:
            worker.join(min(0.1, left))
            if self.cancel_event.is_set():  # the run is cancelled: stop this tool's guest too
                self.tool_cancel.set()
                worker.join(1.0)
                return (
                    False, f"cancelled: the run was cancelled while {use.name} ran",
                    (time.monotonic() - t0) * 1000,
                )
        ms = (time.monotonic() - t0) * 1000
        if worker.is_alive():
            # Stop the guest at its next epoch tick; the thread is left to finish on its own.
            self.tool_cancel.set()
            worker.join(1.0)
            why = "" if limit >= self.tool_timeout else " (the run's time budget was nearly spent)"
            return False, f"timeout: tool {use.name} did not finish within {limit:g} s{why} (stopped)", ms
        if "error" in box:
            return False, self.llm.settings.redact(box["error"]), ms
        return True, self.llm.settings.redact(_tools.clip(str(box.get("text", "")))), ms

    # --- persistence --------------------------------------------------------------

    def save(self, status: str, result: str | None = None, error: str | None = None) -> None:
        state = {
            "run_id": self.run_id, "agent": self.agent.as_dict(), "task": self.task, "step": self.step,
            "messages": [m.as_dict() for m in self.messages], "usage": self.usage.as_dict(), "status": status,
            "result": result, "error": error, "made": self.made.state(), "workdir": str(self.workdir),
            "model": self.llm.settings.model, "provider": self.llm.settings.provider,
        }
        text = self.llm.settings.redact(json.dumps(state))
        self.vfs_write(STATE_PATH, text.encode(), volume=STATE_VOLUME)

    def append_step(self, record: dict[str, Any]) -> None:
        line = self.llm.settings.redact(json.dumps(record, default=str)) + "\n"
        with open(self.workdir / STEPS_FILE, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        if self.on_step is not None:
            self.on_step(json.loads(line))


def state_context(runtime: Any, run_id: str, tenant: str, agent_id: str) -> Any:
    """The Dock context that reaches a run's VFS instance, where its state is saved."""
    return runtime.dock.context(
        principal=Principal(tenant, f"agent.{agent_id}"), caps={"vfs"}, instance=f"agent-{run_id}"
    )


def load_state(runtime: Any, run_id: str, tenant: str, agent_id: str) -> dict[str, Any] | None:
    """A run's saved state from its VFS, or ``None`` when it has none."""
    ctx = state_context(runtime, run_id, tenant, agent_id)
    try:
        got = runtime.dock.call(ctx, "vfs", "read", {"path": STATE_PATH, "volume": STATE_VOLUME})
    except NotFound:
        return None
    return json.loads(bytes(got["data"]))


def run_caps(runtime: Any, profile: str, allow_build: bool) -> frozenset[str]:
    """What the run's own Dock context may reach: its profile's share of vfs / browse /
    web_search, plus ``build`` only when the deployer allows it (a consent-only cap)."""
    from wbcore_runtime.trust import policy

    prof = policy.profile(profile)
    caps = {"vfs"} | ({"browse"} & prof.caps)
    if "web_search" in runtime.brokers and prof.allow_http:
        caps.add("web_search")
    if allow_build:
        caps.add("build")
    return frozenset(caps)


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a plain name (it names the run's folder and its VFS instance), checked
    before either is touched; else ``InvalidArgs``."""
    if not RUN_ID.match(run_id):
        raise InvalidArgs(f"run id {run_id!r} must match {RUN_ID.pattern} (letters, digits, '.', '_', '-')")
    return run_id


def run_agent(
    runtime: Any, agent: Any, task: str | None,
    *,
    model: str | None = None, max_steps: int = MAX_STEPS, tool_timeout: float = TOOL_TIMEOUT_S,
    workdir: Path | str | None = None, tenant: str = "dev", exec_grant: bool = False,
    profile: str = DEFAULT_PROFILE, allow_build: bool = False, resume: str | None = None,
    run_id: str | None = None, on_step: Callable[[dict[str, Any]], None] | None = None,
    on_text: Callable[[str], None] | None = None, host_tools: Iterable[_tools.HostTool] = (),
    cancel: threading.Event | None = None, review: ReviewQueue | None = None, llm: Any = None,
    inputs: Mapping[str, bytes] | None = None, max_calls: int = MAX_CALLS, run_timeout: float = RUN_TIMEOUT_S,
) -> RunRecord:
    """Run ``agent`` on ``task`` to its end (or continue the run ``resume``). ``inputs``:
    files written to the run's VFS (workspace volume) before its first step — how a
    pipeline hands an agent box its stage input (``input.json``). ``max_calls``: tool calls
    of one reply that run (the rest are refused); ``run_timeout``: the run's wall-clock
    budget in seconds (a resumed run gets a new one)."""
    agent_def = find_agent(runtime, agent)
    if not 1 <= max_steps <= 1000:
        raise InvalidArgs(f"max_steps must be 1..1000, got {max_steps}")
    if not 0 < tool_timeout <= 3600:
        raise InvalidArgs(f"tool_timeout must be in (0, 3600] seconds, got {tool_timeout}")
    if not 1 <= max_calls <= MAX_CALLS_LIMIT:
        raise InvalidArgs(f"max_calls must be 1..{MAX_CALLS_LIMIT}, got {max_calls}")
    if not 0 < run_timeout <= 86400:
        raise InvalidArgs(f"run_timeout must be in (0, 86400] seconds, got {run_timeout}")
    state = None
    if resume is not None:
        run_id = check_run_id(resume)
        state = load_state(runtime, resume, tenant, agent_def.id)
        if state is None:
            raise NotFound(f"run {resume!r} has no saved state in its VFS (nothing to resume)")
        if state["status"] != RUNNING:
            raise InvalidArgs(f"run {resume!r} already ended ({state['status']}); start a new run")
        task = state["task"]
        workdir = workdir or state.get("workdir")
    if not task:
        raise InvalidArgs("give the agent a task")
    run_id = check_run_id(run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8])
    wd = Path(workdir) if workdir else Path(runtime.home) / "agents" / "runs" / run_id
    wd.mkdir(parents=True, exist_ok=True)
    if llm is None:
        if model is None and state is not None:
            model = f"{state['provider']}:{state['model']}"
        llm = runtime.llm(model, agent_model=agent_def.model)
    host_tools = list(host_tools)
    taken = [t.spec.name for t in host_tools if t.spec.name in _tools.SPECS or "__" in t.spec.name]
    if taken:
        raise InvalidArgs(f"host tool name(s) {', '.join(taken)} collide with the loop's own tools "
                          "(base tools, <toolkit>__<tool>, local__…); rename them")
    run = Run(
        runtime=runtime, agent=agent_def, task=task, run_id=run_id, workdir=wd, llm=llm, max_steps=max_steps,
        tool_timeout=tool_timeout, tenant=tenant, max_calls=max_calls, run_timeout=run_timeout,
        exec_grant=exec_grant, profile=profile, caps=run_caps(runtime, profile, allow_build),
        review=review or ReviewQueue(wd / "_review.jsonl"), host_tools={t.spec.name: t for t in host_tools},
        on_step=on_step, on_text=on_text, cancel_event=cancel or threading.Event(),
    )
    if state is not None:
        run.messages = [Message.from_dict(m) for m in state["messages"]]
        run.step = int(state["step"])
        u = state.get("usage") or {}
        run.usage = Usage(u.get("input_tokens", 0), u.get("output_tokens", 0), u.get("cost_usd"),
                          bool(u.get("estimated", False)))
        run.made.restore(state.get("made") or [])
    else:
        run.messages = [Message("user", task)]
        for path, data in (inputs or {}).items():
            run.vfs_write(path, bytes(data))
    return drive(run)


def system_prompt(run: Run) -> str:
    from wbcore_runtime.trust import verdict as trust

    return _agents.prompt(
        run.agent, run.runtime.discover(), lambda tk: trust.unavailable_reason(tk, run.runtime),
        read_skill=_agents.READ_SKILL_TOOL,
    )  # the loop's agent has no shell


def _arg_size(use: ToolUse) -> int:
    try:
        return len(json.dumps(dict(use.arguments), default=str))
    except (TypeError, ValueError):
        return MAX_ARGUMENT + 1


def admit(run: Run, calls: tuple[ToolUse, ...]) -> tuple[tuple[ToolUse, ...], dict[str, str]]:
    """The reply's calls as they are kept in the conversation, and the refusals: calls past
    ``max_calls`` and calls whose arguments are over ``MAX_ARGUMENT`` are answered with
    a tool error and keep no arguments (the conversation stays bounded whatever the model sent)."""
    kept: list[ToolUse] = []
    refused: dict[str, str] = {}
    for n, use in enumerate(calls):
        if n >= run.max_calls:
            refused[use.id] = (
                f"refused: this reply asked for {len(calls)} tool calls; at most {run.max_calls} run "
                "per reply. Ask again for the ones you still need."
            )
            kept.append(ToolUse(use.id, use.name, {}))
            continue
        size = _arg_size(use)
        if size > MAX_ARGUMENT:
            refused[use.id] = (
                f"invalid-args: the arguments of {use.name} are {size} bytes, over the "
                f"{MAX_ARGUMENT}-byte cap; write large data with vfs_write in parts and pass a path"
            )
            kept.append(ToolUse(use.id, use.name, {"_dropped": f"{size} bytes over the cap"}))
            continue
        kept.append(use)
    return tuple(kept), refused


def conversation_size(run: Run) -> int:
    """The bytes the conversation takes in the saved state: its JSON as :meth:`Run.save` writes
    it (a character outside ASCII is an escape of 6 or 12 bytes there, not one)."""
    return len(json.dumps([m.as_dict() for m in run.messages], default=str))


def drive(run: Run) -> RunRecord:
    """The loop itself, from the run's current state."""
    settings = run.llm.settings
    system = system_prompt(run)
    outer_cancel = run.cancel_event
    status, result, error = FAILED, None, None
    run.deadline = time.monotonic() + run.run_timeout
    try:
        run.save(RUNNING)
        while True:
            if outer_cancel.is_set():
                raise Cancelled(f"run {run.run_id} was cancelled at step {run.step}")
            if run.step >= run.max_steps:
                raise StepLimit(f"max-steps: the run used its {run.max_steps} steps without calling done")
            if run.time_left() <= 0:
                raise OutOfTime(
                    f"the run's time budget of {run.run_timeout:g} s is spent (at step {run.step}); "
                    "resume it for a new budget"
                )
            specs = run.tool_specs()
            # the definition's :TOOL_CHOICE: for this step (a named tool must be offered now)
            choice = check_tool_choice(_agents.tool_choice_at(run.agent, run.step), specs)
            t0 = time.monotonic()
            # one span per step (the LLM turn and the tool calls it asks for), when telemetry is on
            with telemetry.agent_step(
                run.runtime, step=run.step + 1, agent=run.agent.id, model=settings.model,
                provider=settings.provider, session=run.run_id,
            ) as span:
                answer = run.llm.complete(
                    ChatRequest(
                        system, tuple(run.messages), tuple(specs), deadline=run.deadline, tool_choice=choice
                    ),
                    on_text=run.on_text,
                )
                run.step += 1
                run.usage = run.usage + answer.usage
                span.set(telemetry.TOKENS_IN, answer.usage.input_tokens)
                span.set(telemetry.TOKENS_OUT, answer.usage.output_tokens)
                if answer.usage.cost_usd is not None:
                    span.set(telemetry.COST, answer.usage.cost_usd)
                calls, refused = admit(run, answer.tool_calls)
                kept = len(run.messages)  # the conversation before this step (it fit the cap)
                run.messages.append(Message("assistant", answer.text, calls))
                results: list[dict[str, Any]] = []
                finished: str | None = None
                for use in calls:
                    if use.id in refused:
                        ok, text, ms = False, refused[use.id], 0.0
                    elif outer_cancel.is_set():
                        ok, text, ms = False, "cancelled: the run was cancelled before this call ran", 0.0
                    elif run.time_left() <= 0:
                        ok, text, ms = (
                            False,
                            (
                                f"refused: the run's time budget of {run.run_timeout:g} s is spent; "
                                "this call did not run"
                            ),
                            0.0,
                        )
                    else:
                        ok, text, ms = run.run_tool(use)
                    # every call gets an answer (both vendors require one per call id)
                    if len(results) < run.max_calls + 1:
                        results.append(
                            {
                                "id": use.id, "name": use.name, "ok": ok, "text": text[:4000],
                                "ms": round(ms, 1),
                            }
                        )
                    run.messages.append(Message("tool", text, tool_call_id=use.id, is_error=not ok))
                    if use.name == "done" and ok:
                        finished = text
                if len(calls) > len(results):
                    results.append({"refused": len(calls) - len(results), "ms": 0.0})
                span.set(telemetry.OUTCOME, "done" if finished is not None or not answer.tool_calls else "ok")
            size = conversation_size(run)
            if finished is None and answer.tool_calls and size > MAX_CONVERSATION:
                # One reply may add more than the VFS's file cap holds (16 calls of 1 MiB each):
                # the state keeps the conversation as it was before it, so it always saves.
                del run.messages[kept:]
                raise InvalidArgs(f"the conversation is {size} bytes, over the {MAX_CONVERSATION}-byte cap; "
                                  f"the run stops here (its state is saved without step {run.step})")
            if finished is None and answer.tool_calls:
                run.save(RUNNING)  # before the step is announced: a crash after it loses nothing
            run.append_step({"run": run.run_id, "step": run.step, "t": time.time(), "model": answer.model,
                             "text": answer.text, "tool_calls": [u.as_dict() for u in calls[:run.max_calls]],
                             "calls": len(calls), "refused": len(refused), "results": results,
                             "usage": answer.usage.as_dict(), "attempts": answer.attempts,
                             "llm_ms": round((time.monotonic() - t0) * 1000, 1)})
            if finished is not None or not answer.tool_calls:
                status, result = DONE, finished if finished is not None else answer.text
                break
    except StepLimit as exc:
        status, error = MAX_STEPS_REACHED, exc.message
    except OutOfTime as exc:
        status, error = OUT_OF_TIME, f"timeout: {exc.message}"
    except Cancelled as exc:
        status, error = CANCELLED, exc.message
    except WbError as exc:
        status, error = FAILED, settings.redact(f"{exc.name}: {exc.message}")
    except Exception as exc:  # noqa: BLE001 - a loop bug ends the run as an error, its state still saved
        status, error = FAILED, settings.redact(f"internal: {type(exc).__name__}: {exc}")
    try:
        run.save(status, result, error)
    except WbError as exc:  # the trail says why the state could not be written; the run's outcome stands
        error = (error + "; " if error else "") + settings.redact(
            f"state not saved: {exc.name}: {exc.message}"
        )
        status = FAILED if status == DONE else status
    run.append_step({"run": run.run_id, "step": run.step, "t": time.time(), "event": status, "result": result,
                     "error": error, "usage": run.usage.as_dict()})
    return RunRecord(run.run_id, run.agent.id, status, result, error, run.step, run.usage, run.workdir,
                     settings.model, settings.provider)
