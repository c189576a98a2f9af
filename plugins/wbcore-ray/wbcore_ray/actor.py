"""What runs on a node: an actor holding one job's compiled module (and, for a kernel, its
instance), fed chunks of inputs.

A node has no share of the driver's disk: each actor opens a runtime on its node's home
(``$WB_RAY_NODE_HOME`` or ``<tmp>/wbcore-ray/<node id>``), puts the module's bytes — read from
Ray's object store, checked against the job's sha256 — into that home's artifact store,
and loads it through the shape's runner, which compiles it once into the home's compiled
cache. Actors of one node load under one file lock, so the first compiles and the others
deserialize what it wrote: **one compile per node** however many actors it runs
(:meth:`NodeWorker.stats` says which did).

The job arrives without the driver's environment (``env`` is emptied before it leaves:
it may hold tokens) and with its deadline as seconds left, since a monotonic clock is one
machine's. A ``node``-tier job runs at ``instance`` here: this actor is the other node.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.errors import InvalidArgs

NODE_TIER = "node"


def node_home(node_id: str) -> Path:
    from wbcore_ray.cluster import NODE_HOME_ENV

    base = os.environ.get(NODE_HOME_ENV)
    home = Path(base) if base else Path(tempfile.gettempdir()) / "wbcore-ray" / node_id[:16]
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def need_lane(runtime: Any, lane: str, node: str, job: fabric.Job) -> None:
    """The node serves ``lane``'s runner, as the driver does: its artifacts (js: the
    reactor with the app's sources inside) run only through it. The sources reach the
    runner from the artifact just stored and verified here, never from a driver's path."""
    rec = runtime.lanes.get(lane) if lane in runtime.lanes else None
    if rec is None or getattr(rec, "runner", None) is None:
        raise InvalidArgs(f"ray node {node[:12]}: {job.kind} {job.name!r} was built by the {lane} lane, "
                          "whose runner this node does not have; install the same wbcore plugins on every "
                          "node as on the driver")
    avail = rec.available()
    if not avail.ok:
        from wbcore_runtime.contract.errors import Unavailable

        raise Unavailable(f"ray node {node[:12]}: the {lane} lane cannot run {job.name!r} here: "
                          f"{avail.reason}")


class NodeWorker:
    """Ray actor (``ray.remote(NodeWorker)``): one job, many chunks."""

    def __init__(self, job: fabric.Job, seconds_left: float | None) -> None:
        import ray

        self.node = ray.get_runtime_context().get_node_id()
        self.home = node_home(self.node)
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        self.job = dataclasses.replace(job, home=self.home, roots=(), cwd=self.home, env={},
                                       deadline=deadline)
        self.run: Any = None
        self.compiled = False
        self.inputs = self.chunks = 0
        self.load_s = 0.0

    def load(self, wasm: bytes, lane: str | None = None) -> dict[str, Any]:
        """Put the module into this node's store and load it (compiling it if no actor of
        this node has); for a kernel, open the instance every chunk reuses. ``lane`` names
        the compile-and-run lane whose runner runs it on the driver
        (:func:`wbcore_ray.cluster.lane_runner`): this node must serve the same."""
        from wbcore_runtime.dispatch import tiers
        from wbcore_runtime.runtime import Runtime

        t0 = time.perf_counter()
        job = self.job
        with open(self.home / ".load.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one loader per node at a time: the first compiles
            runtime = Runtime.open(home=self.home, roots=[], env={}, cwd=self.home)
            art = runtime.artifacts.put_bytes(wasm)
            sha = job.entry.sha256
            if art.sha256 != sha:
                raise InvalidArgs(f"ray node {self.node[:12]}: the module received hashes to "
                                  f"{art.sha256[:12]}…, not the job's {sha[:12]}…; refused")
            if lane is not None:
                need_lane(runtime, lane, self.node, job)
            before = self._compiled_forms(runtime, sha)
            req = dataclasses.replace(job.request, artifact=runtime.artifacts.path(sha), tier="instance")
            self.job = job = dataclasses.replace(job, request=req)
            tier = "instance" if job.tier == NODE_TIER else job.tier
            target = tiers.target_for(runtime, job.entry, tier)
            modules = getattr(target, "modules", None)  # the shape's runner can load ahead of the first call
            if modules is not None:
                modules.load(runtime.artifacts, sha)
            ahead = getattr(target, "load_ahead", None)  # a lane's runner readies its artifact the same way
            if ahead is not None:
                ahead(req.artifact, sha)
            self.run = batch.runner(runtime, job, tier=tier)
            self.compiled = self._compiled_forms(runtime, sha) > before
        self.load_s = time.perf_counter() - t0
        return self.stats()

    @staticmethod
    def _compiled_forms(runtime: Any, sha: str) -> int:
        folder = runtime.artifacts.root / sha[:2]
        return len(list(folder.glob(f"{sha}.*.cwasm"))) if folder.is_dir() else 0

    def chunk(self, body: list[Any], skip: tuple[int, ...]) -> tuple[Any, list[tuple[int, str, str]], float]:
        t0 = time.perf_counter()
        out, errors = batch.run_chunk(self.job.kind, self.run, body, frozenset(skip), self.job.joined)
        self.inputs += len(body)
        self.chunks += 1
        return out, errors, time.perf_counter() - t0

    def stats(self) -> dict[str, Any]:
        return {"node": self.node, "pid": os.getpid(), "compiled": self.compiled, "inputs": self.inputs,
                "chunks": self.chunks, "load_s": round(self.load_s, 4)}
