"""Pipelines (seed 003): boxes composed with ``pipe`` and ``fan_out``.

A *box* is a registered command (argv fixed by the author), a kernel, or an agent (seed 003:
an agent with its toolkits is a box; its task is fixed by the author, the stage's input is
written to its run's VFS as ``input.json`` and its ``done`` result is what it carries on;
its tool calls run each at its toolkit's resolved tier). A ``pipe`` stage
runs one box on the carried bytes; a ``fan_out`` stage runs each of its boxes on the same
bytes, concurrently, and carries their outputs merged as a JSON array (each element the
box's stdout parsed as JSON when it parses, else its text). Every box runs through
:mod:`wbcore_runtime.dispatch.dispatcher` (``call_command``; a kernel ``dispatch.kernels.open_kernel``): its
own trust, caps and tier, in a fresh instance per stage. A box that exits non-zero, or fails, ends the run
there.

Authored in Python::

    Pipeline.named("analysis", Box("upper")).fan_out([Box("jq", ("-c", "{a: .}")), Box("wc")]).pipe(
        Box("jq", (".",)))

or in Org (:func:`parse`): a heading tagged ``:pipeline:`` whose child headings are stages,
each titled ``pipe`` or ``fan_out``; a pipe stage names its box in ``:RUN:`` (the command
name, then its arguments, split like a shell line but never run by a shell), a fan_out
stage's child headings are its boxes, each with ``:RUN:``; ``:KIND: kernel`` / ``agent``
(``:RUN: <agent id or .org> <task…>``) and ``:TIER:`` are optional on any box, and a command
box may bind host folders with ``:MOUNTS: HOST[:GUEST][:ro|rw] …`` (at most 4, split like
``:RUN:``; at a tier that binds folders, e.g. ``:TIER: container``)::

    * analysis :pipeline:
    ** pipe :stage:
       :PROPERTIES:
       :RUN: upper
       :END:
    ** fan_out :stage:
    *** words
        :PROPERTIES:
        :RUN: wc -w
        :END:

Each run keeps its input and every stage's output in ``$WB_HOME/pipelines/<run-id>/``
(``result.json`` holds the :class:`PipelineResult`).

A box's mounts are granted by the core's one check (``wbcore_runtime.dispatch.mounts.grant``):
a pipeline the deployer runs (``wbx pipeline run``, :func:`run` without ``remote``) grants
them as ``wbx run --mount`` does; one run for a remote caller (``remote="engine"``…) only
inside the deployer's ``WB_MOUNT_ROOTS``.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import secrets
import shlex
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import InvalidArgs, ManifestError, Timeout, WbError

if TYPE_CHECKING:
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.runtime import Runtime

OPS = ("pipe", "fan_out")
MAX_FAN_OUT = 64
MAX_STAGES = 256
MAX_FILE = 1 << 20
_clock = time.perf_counter


@dataclass(frozen=True, slots=True)
class Box:
    """One registered command (with its fixed ``argv``) or kernel."""

    name: str
    argv: tuple[str, ...] = ()  # an agent box: the words of its task
    kind: str = "command"  # command | kernel | agent
    tier: str | None = None
    mounts: tuple[str, ...] = ()  # host folders (HOST[:GUEST][:ro|rw]) for a command box

    def label(self) -> str:
        return " ".join((self.name, *self.argv))


@dataclass(frozen=True, slots=True)
class Stage:
    op: str
    boxes: tuple[Box, ...]
    line: int = 0  # where it was authored (Org), for messages


@dataclass(frozen=True, slots=True)
class BoxResult:
    box: str
    exit_code: int | None
    output: bytes
    stderr: bytes
    wall_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StageResult:
    """One stage: its boxes' results, the bytes it carried on, its wall time, where kept."""

    index: int
    op: str
    boxes: tuple[BoxResult, ...]
    output: bytes
    wall_s: float
    kept: str | None = None

    @property
    def ok(self) -> bool:
        return all(b.error is None and b.exit_code in (0, None) for b in self.boxes)


@dataclass(frozen=True, slots=True)
class PipelineResult:
    """Seed 003's ``PipelineResult``: the final output, each stage, success, the run folder."""

    name: str
    run_id: str
    success: bool
    output: bytes
    stages: tuple[StageResult, ...]
    wall_s: float
    folder: Path | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "run_id": self.run_id, "success": self.success,
            "wall_s": round(self.wall_s, 6), "output": self.output.decode("utf-8", errors="replace"),
            "error": self.error, "folder": str(self.folder) if self.folder else None,
            "stages": [{"index": s.index, "op": s.op, "wall_s": round(s.wall_s, 6), "kept": s.kept,
                        "ok": s.ok,
                        "boxes": [{"box": b.box, "exit": b.exit_code, "wall_s": round(b.wall_s, 6),
                                   "error": b.error, "stderr": b.stderr.decode("utf-8", errors="replace")}
                                  for b in s.boxes]}
                       for s in self.stages],
        }


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    stages: tuple[Stage, ...] = field(default=())

    @classmethod
    def named(cls, name: str, box: Box | str) -> Pipeline:
        return cls(name).pipe(box)

    def pipe(self, box: Box | str) -> Pipeline:
        return replace(self, stages=(*self.stages, Stage("pipe", (_box(box),))))

    def fan_out(self, boxes: Sequence[Box | str]) -> Pipeline:
        if not boxes:
            raise InvalidArgs(f"pipeline {self.name!r}: fan_out needs at least one box")
        if len(boxes) > MAX_FAN_OUT:
            raise InvalidArgs(f"pipeline {self.name!r}: fan_out of {len(boxes)} boxes exceeds {MAX_FAN_OUT}")
        return replace(self, stages=(*self.stages, Stage("fan_out", tuple(_box(b) for b in boxes))))

    def run(self, runtime: Runtime, data: bytes = b"", *, timeout: float | None = None,
            principal: Principal | None = None, keep: bool = True,
            remote: str | None = None) -> PipelineResult:
        return run(runtime, self, data, timeout=timeout, principal=principal, keep=keep, remote=remote)


def _box(box: Box | str) -> Box:
    return Box(box) if isinstance(box, str) else box


# --- running --------------------------------------------------------------------------------


def run(runtime: Runtime, pipeline: Pipeline, data: bytes = b"", *, timeout: float | None = None,
        principal: Principal | None = None, keep: bool = True, remote: str | None = None) -> PipelineResult:
    """Run ``pipeline`` on ``data``; stop at the first stage that fails (its result says why).
    ``remote``: the remote principal the run is for (its boxes' mounts only inside
    ``WB_MOUNT_ROOTS``); ``None``: the deployer's own run."""
    if not pipeline.stages:
        raise InvalidArgs(f"pipeline {pipeline.name!r} has no stages")
    if timeout is not None and timeout <= 0:
        raise InvalidArgs(f"pipeline timeout must be > 0 seconds, got {timeout}")
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)
    if getattr(runtime, "tracer", None) is None:
        return _run(runtime, pipeline, data, run_id, timeout, principal, keep, remote)
    from wbcore_runtime.contract import telemetry

    with telemetry.span(runtime, "wb.pipeline", {"wb.pipeline": pipeline.name, "wb.pipeline.run_id": run_id,
                                                 "wb.pipeline.stages": len(pipeline.stages)}) as s:
        res = _run(runtime, pipeline, data, run_id, timeout, principal, keep, remote)
        s.set("wb.wall_s", res.wall_s)
        if res.error:
            s.set("wb.error", res.error)
        s.set(telemetry.OUTCOME, "ok" if res.success else "error")
        return res


def _run(runtime: Runtime, pipeline: Pipeline, data: bytes, run_id: str, timeout: float | None,
         principal: Principal | None, keep: bool, remote: str | None = None) -> PipelineResult:
    from wbcore_runtime.contract import telemetry

    folder = _folder(runtime, run_id) if keep else None
    if folder is not None:
        (folder / "input").write_bytes(data)
    deadline = None if timeout is None else time.monotonic() + timeout
    started = _clock()
    carry = data
    stages: list[StageResult] = []
    error = None
    for index, stage in enumerate(pipeline.stages):
        t0 = _clock()
        with telemetry.span(runtime, "wb.stage", {"wb.stage.index": index, "wb.stage.op": stage.op,
                                                  "wb.stage.boxes": [b.label() for b in stage.boxes]}) \
                as span:
            if len(stage.boxes) == 1 and stage.op == "pipe":
                boxes = [_run_box(runtime, stage.boxes[0], carry, deadline, principal, remote)]
            else:
                with ThreadPoolExecutor(max_workers=len(stage.boxes),
                                        thread_name_prefix="wb-pipeline") as pool:
                    # each box runs in a copy of this context: its call spans nest under the stage's
                    futures = [pool.submit(contextvars.copy_context().run, _run_box, runtime, b, carry,
                                           deadline, principal, remote) for b in stage.boxes]
                    boxes = [f.result() for f in futures]
            span.set(telemetry.OUTCOME,
                     "ok" if all(b.error is None and b.exit_code in (0, None) for b in boxes)
                     else "error")
        out = boxes[0].output if stage.op == "pipe" else merge([b.output for b in boxes])
        kept = None
        if folder is not None:
            kept = f"{index:02d}-{stage.op}.out"
            (folder / kept).write_bytes(out)
        result = StageResult(index, stage.op, tuple(boxes), out, _clock() - t0, kept)
        stages.append(result)
        if not result.ok:
            bad = next(b for b in boxes if b.error is not None or b.exit_code not in (0, None))
            why = bad.error or f"exit {bad.exit_code}"
            error = f"stage {index} ({stage.op}) box {bad.box!r}: {why}"
            break
        carry = out
    res = PipelineResult(pipeline.name, run_id, error is None, carry if error is None else b"", tuple(stages),
                         _clock() - started, folder, error)
    if folder is not None:
        (folder / "result.json").write_text(json.dumps(res.as_dict(), indent=2) + "\n")
    return res


def _run_box(runtime: Runtime, box: Box, data: bytes, deadline: float | None,
             principal: Principal | None, remote: str | None = None) -> BoxResult:
    from wbcore_runtime.dispatch import dispatcher as dispatch
    from wbcore_runtime.dispatch import kernels

    t0 = _clock()
    try:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise Timeout("the pipeline's deadline passed before this box ran")
        if box.mounts and box.kind != "command":
            raise InvalidArgs(f"box {box.label()!r}: host folders (mounts) bind only into a command box")
        if box.kind == "agent":
            return _run_agent_box(runtime, box, data, left, principal, t0)
        if box.kind == "kernel":
            inst = kernels.open_kernel(runtime, box.name, principal=principal, timeout=left, tier=box.tier)
            try:
                out = inst.call(data)
            finally:
                inst.close()
            return BoxResult(box.label(), None, out, b"", _clock() - t0)
        res = dispatch.call_command(runtime, box.name, box.argv, data, principal=principal, timeout=left,
                                    tier=box.tier, mounts=box.mounts, remote=remote if box.mounts else None)
        return BoxResult(box.label(), res.exit_code, res.stdout, res.stderr, _clock() - t0)
    except WbError as exc:
        return BoxResult(box.label(), None, b"", b"", _clock() - t0, error=f"{exc.name}: {exc.message}")


def _run_agent_box(runtime: Runtime, box: Box, data: bytes, left: float | None, principal: Principal | None,
                   t0: float) -> BoxResult:
    """An agent box: the stage input as ``input.json`` in the run's VFS, the task from the
    author, the run cancelled at the pipeline's deadline; its ``done`` result carries on."""
    import threading

    cancel = threading.Event()
    timer = None if left is None else threading.Timer(max(0.0, left), cancel.set)
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        kw: dict[str, Any] = {"inputs": {"input.json": data}, "cancel": cancel}
        if principal is not None:
            kw["tenant"] = principal.tenant
        rec = runtime.agents.run(box.name, " ".join(box.argv), **kw)
    finally:
        if timer is not None:
            timer.cancel()
    if rec.status != "done":
        why = "the pipeline's deadline passed" if cancel.is_set() else (rec.error or rec.status)
        return BoxResult(box.label(), None, b"", b"", _clock() - t0,
                         error=f"agent {rec.status}: {why} (run {rec.run_id})")
    result = rec.result if isinstance(rec.result, str) else json.dumps(rec.result)
    return BoxResult(box.label(), None, (result or "").encode(), b"", _clock() - t0)


def merge(outputs: Sequence[bytes]) -> bytes:
    """Fan-out outputs as one JSON array: each parsed as JSON when it parses, else its text."""
    items: list[Any] = []
    for raw in outputs:
        text = raw.decode("utf-8", errors="replace")
        try:
            items.append(json.loads(text))
        except ValueError:
            items.append(text)
    return json.dumps(items, ensure_ascii=False).encode()


def _folder(runtime: Runtime, run_id: str) -> Path:
    folder = runtime.home / "pipelines" / run_id
    folder.mkdir(parents=True, exist_ok=False)
    os.chmod(folder, 0o700)
    return folder


# --- Org ----------------------------------------------------------------------------------------

_HEADING = re.compile(r"^(\*+)\s+(.*?)\s*$")
_TAGS = re.compile(r"^(.*?)\s+(:[\w@#%:]+:)$")
_PROPERTY = re.compile(r"^\s*:([A-Za-z0-9_+-]+):\s*(.*?)\s*$")


@dataclass
class _Node:
    level: int
    title: str
    tags: tuple[str, ...]
    line: int
    props: dict[str, tuple[str, int]] = field(default_factory=dict)
    children: list[_Node] = field(default_factory=list)


def _nodes(text: str) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[_Node] = []
    in_drawer = False
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADING.match(line)
        if m:
            title, tags = m.group(2), tuple[str, ...]()
            t = _TAGS.match(title)
            if t:
                title, tags = t.group(1), tuple(x for x in t.group(2).split(":") if x)
            node = _Node(len(m.group(1)), title.strip(), tags, n)
            while stack and stack[-1].level >= node.level:
                stack.pop()
            (stack[-1].children if stack else roots).append(node)
            stack.append(node)
            in_drawer = False
            continue
        s = line.strip()
        if s.upper() == ":PROPERTIES:":
            in_drawer = True
        elif s.upper() == ":END:":
            in_drawer = False
        elif in_drawer and stack:
            p = _PROPERTY.match(line)
            if p:
                stack[-1].props[p.group(1).upper()] = (p.group(2), n)
    return roots


def _walk(nodes: list[_Node]) -> list[_Node]:
    out = []
    for node in nodes:
        out.append(node)
        out.extend(_walk(node.children))
    return out


def parse(text: str, path: Path | str = "pipeline.org") -> list[Pipeline]:
    """Every ``:pipeline:`` heading of an Org document as a :class:`Pipeline`."""
    found = []
    for node in _walk(_nodes(text)):
        if "pipeline" not in node.tags:
            continue
        name = node.props.get("NAME", (node.title, node.line))[0] or f"pipeline-{node.line}"
        stages = [_stage(path, child) for child in node.children]
        if not stages:
            raise ManifestError(path, node.line, "pipeline",
                                f"{name!r} has no stage headings (** pipe / ** fan_out)")
        if len(stages) > MAX_STAGES:
            raise ManifestError(path, node.line, "pipeline", f"{len(stages)} stages exceed {MAX_STAGES}")
        found.append(Pipeline(name, tuple(stages)))
    if not found:
        raise ManifestError(path, 1, "pipeline",
                            "no heading tagged :pipeline: (e.g. '* analysis :pipeline:')")
    return found


def load(path: Path, name: str | None = None) -> Pipeline:
    """The pipeline ``name`` (or the only / first one) of the Org file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgs(f"{path}: cannot read the pipeline file ({exc})") from None
    pipelines = parse(text, path)
    if name is None:
        return pipelines[0]
    for p in pipelines:
        if p.name == name:
            return p
    from wbcore_runtime.contract.errors import unknown_name

    raise InvalidArgs(f"{path}: " + unknown_name("pipeline", name, [p.name for p in pipelines]))


def _stage(path: Path | str, node: _Node) -> Stage:
    op = node.title.split()[0] if node.title else ""
    if op not in OPS:
        raise ManifestError(path, node.line, "stage",
                            f"heading {node.title!r} is not a stage; title it 'pipe' or 'fan_out'")
    if op == "pipe":
        if node.children:
            raise ManifestError(path, node.line, "stage",
                                "a pipe stage runs one box (its :RUN:); sub-headings are for fan_out")
        return Stage(op, (_box_of(path, node),), node.line)
    boxes = [_box_of(path, child) for child in node.children]
    if "RUN" in node.props:
        raise ManifestError(path, node.props["RUN"][1], "RUN",
                            "a fan_out stage has no :RUN: of its own; give each box a sub-heading with :RUN:")
    if not boxes:
        raise ManifestError(path, node.line, "stage",
                            "fan_out needs sub-headings, one per box, each with :RUN:")
    if len(boxes) > MAX_FAN_OUT:
        raise ManifestError(path, node.line, "stage", f"fan_out of {len(boxes)} boxes exceeds {MAX_FAN_OUT}")
    return Stage(op, tuple(boxes), node.line)


def _box_of(path: Path | str, node: _Node) -> Box:
    if "RUN" not in node.props:
        raise ManifestError(path, node.line, "RUN",
                            f"{node.title!r} names no box: add ':RUN: <command> [args…]' "
                                                    "in its :PROPERTIES: drawer")
    value, line = node.props["RUN"]
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ManifestError(path, line, "RUN", f"cannot split {value!r}: {exc}") from None
    if not words:
        raise ManifestError(path, line, "RUN", "empty: name a registered command (e.g. ':RUN: upper')")
    kind = node.props.get("KIND", ("command", line))[0] or "command"
    if kind not in ("command", "kernel", "agent"):
        raise ManifestError(path, node.props["KIND"][1], "KIND", f"{kind!r}; known: command, kernel, agent")
    if kind == "agent" and len(words) < 2:
        raise ManifestError(path, line, "RUN",
                            "an agent box names the agent, then its task: ':RUN: summarizer \"summarize "
                            "input.json\"'")
    if kind == "kernel" and len(words) > 1:
        raise ManifestError(path, line, "RUN", "a kernel takes no arguments, only its input bytes")
    tier = node.props.get("TIER", ("", line))[0] or None
    return Box(words[0], tuple(words[1:]), kind, tier, _mounts_of(path, node, kind))


def _mounts_of(path: Path | str, node: _Node, kind: str) -> tuple[str, ...]:
    """A box's ``:MOUNTS:`` (specs split like ``:RUN:``), bounded as a remote request's are;
    each folder is checked when the box runs (``dispatch.mounts.grant``), not here."""
    if "MOUNTS" not in node.props:
        return ()
    from wbcore_runtime.dispatch import mounts as granting

    value, line = node.props["MOUNTS"]
    if kind != "command":
        raise ManifestError(path, line, "MOUNTS",
                            f"{kind} boxes bind no host folder; :MOUNTS: is for command boxes")
    try:
        return granting.requested(shlex.split(value), ":MOUNTS:")
    except ValueError as exc:
        raise ManifestError(path, line, "MOUNTS", f"cannot split {value!r}: {exc}") from None
    except InvalidArgs as exc:
        raise ManifestError(path, line, "MOUNTS", exc.message) from None
