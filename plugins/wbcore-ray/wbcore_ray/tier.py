"""The ``node`` isolation tier: one call on another node of a Ray cluster.

``call(request)`` runs a command, ``open(request)`` a kernel instance, in an actor pinned to
a node other than the driver's (round-robin over them; the only node when there is one),
which loads the module from the object store into its node's home and runs it at
``instance`` there — the boundary is the machine. Actors are kept per (kind, module,
profile) so a second call on a node reuses the loaded module (at most ``MAX_ACTORS``; the
oldest is ended to make room). The tier is available only with a configured cluster
(``WB_RAY_ADDRESS``/``RAY_ADDRESS``): escalating a call must never start a local Ray.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Self

from wbcore_ray import cluster
from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.calls import CallResult, CommandRequest
from wbcore_runtime.contract.kernel_calls import KernelRequest
from wbcore_runtime.contract.errors import Internal, Timeout

MAX_ACTORS = 8
#: Seconds beyond the call's own timeout that a round trip to the node may take.
SLACK_S = 60.0


class NodeTier:
    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._actors: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._turn = 0

    def _node(self, ray: Any) -> dict[str, Any]:
        nodes = cluster.nodes(ray)
        here = ray.get_runtime_context().get_node_id()
        others = [n for n in nodes if n["NodeID"] != here] or nodes
        self._turn += 1
        return others[self._turn % len(others)]

    def _actor(self, kind: str, req: CommandRequest | KernelRequest, *, fresh: bool = False) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from wbcore_ray.actor import NodeWorker

        cluster.refuse_remote(self.runtime, kind, req.name, req.caps, req, None, "tier node")
        ray = cluster.connect(start_local=False)
        key = (kind, req.sha256, req.profile, req.toolkit, getattr(req, "spec", None))
        with self._lock:
            handle = None if fresh else self._actors.get(key)
            if handle is not None:
                return ray, handle
            node = self._node(ray)
            entry = self._entry(kind, req)
            job = fabric.Job(kind=kind, name=req.name, tier="node", entry=entry, request=req, caps=req.caps,
                             width=1, home=self.runtime.home, roots=(), cwd=self.runtime.cwd, env={})
            handle = ray.remote(NodeWorker).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                num_cpus=0, max_restarts=0).remote(job, None)
            ray.get(handle.load.remote(cluster.module_ref(ray, self.runtime, req.sha256),
                                       cluster.lane_runner(self.runtime, entry)), timeout=SLACK_S * 5)
            if not fresh:
                self._actors[key] = handle
                while len(self._actors) > MAX_ACTORS:
                    ray.kill(self._actors.popitem(last=False)[1])
            return ray, handle

    def _entry(self, kind: str, req: CommandRequest | KernelRequest) -> Any:
        """The registry's entry of the resolved module (its options name the lane that built
        it, whose runner the node runs it with), or a bare one for a module run by path."""
        from wbcore_runtime.store.registry import Entry

        entry = self.runtime.registry.lookup(kind, req.name)
        if entry is not None and entry.sha256 == req.sha256:
            return entry
        return Entry(kind=kind, name=req.name, sha256=req.sha256, shape=kind, toolkit=req.toolkit)

    def call(self, request: CommandRequest) -> CallResult:
        request = dataclasses.replace(request, cancel=None)  # an Event does not cross machines
        ray, handle = self._actor("command", request)
        out, _ = _one(ray, handle, (request.argv, request.stdin), request.timeout_s)
        return batch.result_from_wire(out)

    def open(self, request: KernelRequest) -> NodeKernel:
        request = dataclasses.replace(request, cancel=None)  # an Event does not cross machines
        ray, handle = self._actor("kernel", request, fresh=True)  # an instance of its own, as open promises
        return NodeKernel(ray, handle, request)


def _one(ray: Any, handle: Any, payload: Any, timeout_s: float) -> tuple[Any, None]:
    try:
        outs, errors, _ = ray.get(handle.chunk.remote([payload], ()), timeout=timeout_s + SLACK_S)
    except ray.exceptions.GetTimeoutError:
        raise Timeout(f"tier node: no answer within {timeout_s + SLACK_S:g} s") from None
    except ray.exceptions.RayError as exc:
        raise Internal(f"tier node: the node's actor failed: {exc}") from None
    if errors:
        _, kind, message = errors[0]
        raise batch.error_from_wire(kind, message)
    return outs[0], None


class NodeKernel:
    """A kernel instance living on a node: ``call(data)`` is one round trip."""

    def __init__(self, ray: Any, handle: Any, request: KernelRequest) -> None:
        self.ray, self.handle, self.request = ray, handle, request

    def call(self, data: bytes | bytearray | memoryview) -> bytes:
        out, _ = _one(self.ray, self.handle, bytes(data), self.request.spec.timeout_s)
        return out

    def close(self) -> None:
        if self.handle is not None:
            self.ray.kill(self.handle)
            self.handle = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
