"""The ``ray`` fabric engine: ``fabric.map`` over Ray actors spread across a cluster's nodes.

Per ``map``: ``width`` actors (:class:`wbcore_ray.actor.NodeWorker`), placed round-robin over the
alive nodes with CPUs (each pinned to its node, ``NodeAffinitySchedulingStrategy``); the
module goes into the object store once (:func:`wbcore_ray.cluster.module_ref`) and each node
compiles it once. Inputs travel in chunks, one actor method call each — Ray's per-call cost
is about a millisecond, so a chunk aims at ``TARGET_S`` of work (up to ``MAX_BATCH`` inputs
and about ``CHUNK_BYTES`` of input) — and each actor has at most ``K`` chunks outstanding (one running, two
queued). Results come back in input order as ``fabric.ResultChunk`` records, as from the local engine;
the window (``width × K`` chunks) bounds the driver's memory and reading of the inputs.

An actor that dies fails the inputs it held and is replaced on the same node (at most
``MAX_RESTARTS`` times per map). ``cancel`` and the batch deadline kill the actors.
After each map, :attr:`RayEngine.stats` holds every actor's report (node, compiled or not,
inputs, chunks).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wbcore_ray import cluster
from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.errors import Internal, Timeout, WbError

K = 3  # chunks outstanding per actor: one running, two queued (as the local engine)
MAX_BATCH = 4096
TARGET_S = 0.05
CHUNK_BYTES = 1 << 20
MAX_RESTARTS = 8
START_TIMEOUT_S = 300.0
POLL_S = 0.05


@dataclass
class _Actor:
    handle: Any
    node: str
    out: list[int] = field(default_factory=list)  # sequence numbers of the chunks it holds


class RayEngine:
    """``FabricDriver`` over Ray actors."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.stats: list[dict[str, Any]] = []  # the last map's actor reports

    def chunks(self, job: fabric.Job, work: fabric.Work, *,
               cancel: Any = None) -> Iterator[fabric.ResultChunk]:
        cluster.refuse_remote(self.runtime, job.kind, job.name, job.caps, job.request, job.entry,
                              "fabric engine 'ray'")
        ray = cluster.connect()
        ref = cluster.module_ref(ray, self.runtime, job.entry.sha256)
        scheduler = _Batch(self, ray, job, work, cancel, ref)
        scheduler.lane = cluster.lane_runner(self.runtime, job.entry)
        return scheduler.chunks_in_order()


class _Batch(batch.Batch):
    POLL_S = POLL_S

    def __init__(self, engine: RayEngine, ray: Any, job: fabric.Job, work: fabric.Work, cancel: Any,
                 ref: Any) -> None:
        from wbcore_ray.actor import NodeWorker

        super().__init__(job, work, cancel, k=K, target_s=TARGET_S, max_batch=MAX_BATCH,
                         chunk_bytes=CHUNK_BYTES)
        self.engine, self.ray, self.ref = engine, ray, ref
        self.remote_cls = ray.remote(NodeWorker)
        self.workers: list[_Actor] = []
        self.calls: dict[Any, tuple[_Actor, int]] = {}  # ObjectRef → (actor, seq)
        self.restarts = 0
        self.reports: list[dict[str, Any]] = []
        self.lane: str | None = None  # the compile-and-run lane whose runner the nodes must serve

    # --- actors ------------------------------------------------------------------------

    def _spawn(self, node: dict[str, Any], share: float) -> _Actor:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        handle = self.remote_cls.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            num_cpus=share, max_restarts=0, max_task_retries=0,
        ).remote(dataclasses_replace_env(self.job), self.job.remaining())
        return _Actor(handle, node["NodeID"])

    def begin(self) -> None:
        ray, job = self.ray, self.job
        nodes = cluster.nodes(ray)
        placed = [nodes[i % len(nodes)] for i in range(job.width)]
        per_node = {n["NodeID"]: placed.count(n) for n in nodes}
        self.shares = {nid: min(1.0, n["Resources"]["CPU"] / max(1, per_node[nid]))
                       for n in nodes if (nid := n["NodeID"]) in per_node}
        self.workers = [self._spawn(n, self.shares[n["NodeID"]]) for n in placed]
        self.nodes = {n["NodeID"]: n for n in nodes}
        self._load(self.workers)

    def _load(self, actors: list[_Actor]) -> None:
        loads = [a.handle.load.remote(self.ref, self.lane) for a in actors]
        left = self.job.remaining()
        timeout = START_TIMEOUT_S if left is None else max(0.1, min(left, START_TIMEOUT_S))
        try:
            self.ray.get(loads, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            if left is not None and timeout >= left - 0.1:
                raise Timeout(f"fabric: {self.job.kind} {self.job.name!r}: the batch deadline passed while "
                              f"{len(actors)} actor(s) loaded it") from None
            raise Internal(f"ray: {len(actors)} actor(s) did not load {self.job.name!r} within {timeout:g} s "
                           f"(is the cluster short of CPUs for width {self.job.width}?)") from None
        except self.ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), WbError) else None
            if cause is not None:
                raise batch.error_from_wire(*batch.error_wire(cause)) from None
            raise Internal(f"ray: an actor could not load {self.job.name!r}: {exc}") from None

    def _replace(self, actor: _Actor, why: str) -> None:
        self.lost(actor, Internal(f"ray: the actor on node {actor.node[:12]} ended ({why}) while it held "
                                  "this input"))
        for ref, (a, _seq) in list(self.calls.items()):
            if a is actor:
                del self.calls[ref]
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise Internal(f"ray: {self.job.kind} {self.job.name!r}: actors ended {self.restarts} times; "
                           "stopped")
        node = self.nodes.get(actor.node) or next(iter(self.nodes.values()))
        fresh = self._spawn(node, self.shares.get(node["NodeID"], 1.0))
        self.workers[self.workers.index(actor)] = fresh
        self._load([fresh])

    # --- chunks ------------------------------------------------------------------------

    def ship(self, actor: _Actor, seq: int, chunk: fabric.Chunk) -> None:
        ref = actor.handle.chunk.remote(chunk.body(self.job.kind), tuple(chunk.errors))
        actor.out.append(seq)
        self.calls[ref] = (actor, seq)

    def wait(self, timeout: float | None) -> Any:
        ready, _ = self.ray.wait(list(self.calls), num_returns=1, timeout=timeout)
        return ready

    def collect(self, ready: list[Any]) -> None:
        ray = self.ray
        for ref in ready:
            entry = self.calls.pop(ref, None)
            if entry is None:
                continue
            actor, seq = entry
            try:
                out, errors, seconds = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
                self._replace(actor, type(exc).__name__)
                continue
            except ray.exceptions.RayTaskError as exc:  # a bug in the actor's loop: this chunk's inputs fail
                self.lost(actor, Internal(f"ray: {exc}"), seq)
                continue
            self.answered(actor, seq, out, errors, seconds)

    def stop(self, *, graceful: bool) -> None:
        ray = self.ray
        if graceful and self.workers:
            try:
                self.reports = ray.get([a.handle.stats.remote() for a in self.workers], timeout=30)
            except Exception:  # noqa: BLE001 - the stats are a report; the results were already given
                self.reports = []
        self.engine.stats = self.reports
        for a in self.workers:
            try:
                ray.kill(a.handle)  # calls may be running: end them now
            except Exception:  # noqa: BLE001, S110 - an actor already gone
                pass
        self.workers = []
        self.calls.clear()


def dataclasses_replace_env(job: fabric.Job) -> fabric.Job:
    """The job as it leaves this machine: without the driver's environment (it may hold
    tokens; the node has its own) and with no monotonic deadline (the actor gets the
    seconds left instead: a monotonic clock is one machine's)."""
    import dataclasses

    return dataclasses.replace(job, env={}, deadline=None)


_clock = time.monotonic
