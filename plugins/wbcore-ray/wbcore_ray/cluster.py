"""Reaching a Ray cluster: which one, its nodes, and artifacts through its object store.

The address comes from ``WB_RAY_ADDRESS`` (``wbx fan --address`` sets it), else Ray's own
``RAY_ADDRESS``; ``auto`` finds a cluster this machine joined with ``ray start``. Without
one, the ``ray`` engine starts a local Ray for the process (``ray.init``: a head node with
this machine's CPUs and a small object store) — the ``node`` tier does not: with no cluster
there is no other node to isolate a call on.

A module travels to the cluster **once**: ``ray.put`` of its verified bytes, kept per
content hash for the driver's life; every actor that needs it gets the same object
reference, which Ray copies to each node's object store once, however many actors (and
tasks) on that node read it.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import threading
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.drivers import Availability

ADDRESS_ENV = "WB_RAY_ADDRESS"
#: Object store of a local Ray started for the run (Ray's minimum is 75 MiB): inputs and
#: outputs of chunks in flight, and the modules. A real cluster sizes its own.
LOCAL_OBJECT_STORE_BYTES = 96 << 20
#: Where a node keeps its home (artifacts, compiled modules): ``$WB_RAY_NODE_HOME`` on the
#: node, else ``<tmp>/wbcore-ray/<node id>``.
NODE_HOME_ENV = "WB_RAY_NODE_HOME"

_lock = threading.Lock()
_refs: dict[tuple[str, str, str], Any] = {}  # (node, job, sha256) → ObjectRef of the module's bytes
_MAX_REFS = 64


def address() -> str | None:
    """The cluster to join: ``$WB_RAY_ADDRESS``, else ``$RAY_ADDRESS``, else none."""
    return os.environ.get(ADDRESS_ENV) or os.environ.get("RAY_ADDRESS") or None


def installed() -> Availability:
    try:
        import ray  # noqa: F401
    except ImportError as exc:  # pragma: no cover - ray is a dependency of this plugin
        return Availability(False, f"ray is not importable ({exc}); pip install wbcore-ray")
    return Availability(True)


def node_tier_available() -> Availability:
    avail = installed()
    if not avail.ok:
        return avail
    if address() is None:
        return Availability(False,
                            f"no Ray cluster to run on: set {ADDRESS_ENV} (or RAY_ADDRESS) to its address, "
                            f"e.g. ray://head:10001 or auto on a node that joined with `ray start`")
    return Availability(True)


def connect(*, start_local: bool = True) -> Any:
    """``ray``, initialised once per process: the configured cluster, or a local Ray."""
    import ray

    with _lock:
        if ray.is_initialized():
            return ray
        addr = address()
        quiet: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                                 "namespace": "wbcore"}
        faults_on = faulthandler.is_enabled()
        if addr is not None:
            try:
                ray.init(address=addr, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise NotFound(f"ray: cannot join the cluster at {addr!r} ({ADDRESS_ENV}/RAY_ADDRESS): "
                               f"{exc}") from None
        elif not start_local:
            raise NotFound(node_tier_available().reason)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                     include_dashboard=False, **quiet)
            atexit.register(_forget_local_node, ray.get_runtime_context().get_node_id())
        if not faults_on and faulthandler.is_enabled():
            # ray.init turns Python's faulthandler on; its SIGILL/SIGSEGV handlers replace
            # wasmtime's trap handlers, so a guest that traps in this process afterwards
            # (an ``unreachable``, a stack overflow) would kill the driver instead of
            # failing its call. Turning it off restores the handlers it replaced.
            faulthandler.disable()
        return ray


def _forget_local_node(node_id: str) -> None:
    """A local Ray lives as long as this process: its node's home (module, compiled form)
    would only be left behind in the temp folder. A real cluster's node homes stay: they
    are the nodes' compiled cache."""
    import shutil

    from wbcore_ray.actor import node_home

    if not os.environ.get(NODE_HOME_ENV):
        shutil.rmtree(node_home(node_id), ignore_errors=True)


def nodes(ray: Any) -> list[dict[str, Any]]:
    """Alive nodes that have CPUs, the driver's own node first."""
    here = ray.get_runtime_context().get_node_id()
    alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    if not alive:
        raise NotFound("ray: the cluster has no alive node with CPUs")
    return sorted(alive, key=lambda n: (n["NodeID"] != here, n["NodeID"]))


def module_ref(ray: Any, runtime: Any, sha: str) -> Any:
    """The object reference of module ``sha``'s verified bytes, put once per driver."""
    ctx = ray.get_runtime_context()
    key = (ctx.get_node_id(), ctx.get_job_id(), sha)  # a reference is valid only in the session that put it
    with _lock:
        ref = _refs.get(key)
        if ref is None:
            ref = ray.put(runtime.artifacts.read_verified(sha))
            if len(_refs) >= _MAX_REFS:
                _refs.pop(next(iter(_refs)))
            _refs[key] = ref
        return ref


def refuse_remote(runtime: Any, kind: str, name: str, caps: frozenset[str], request: Any, entry: Any,
                  where: str) -> None:
    """What cannot run on another machine: caps (their brokers hold this host's state) and
    host folders (``#+PREOPEN``). A module built by a compile-and-run lane does go: its
    artifact is all its runner needs (js: the reactor with the app's sources inside, one
    sha256), and the node runs it with the same lane's runner (:func:`lane_runner`)."""
    if caps:
        raise InvalidArgs(f"{where}: {kind} {name!r} is granted caps ({' '.join(sorted(caps))}); a node of a "
                          f"Ray cluster cannot reach this host's Dock. Use the local or threads engine")
    if getattr(request, "preopens", None) or getattr(request, "scratch", None):
        held = request.preopens[0][0] if request.preopens else "a #+SCRATCH folder"
        raise InvalidArgs(f"{where}: {kind} {name!r} preopens a host folder ({held}), which other "
                          f"nodes do not have. Run it on this machine (local engine)")


def lane_runner(runtime: Any, entry: Any) -> str | None:
    """The lane whose runner runs ``entry`` here (``BuildLane.runner``: a compile-and-run
    lane built it), or ``None`` (the shape's runner does). A node is told so and refuses
    the job when it cannot run that lane's artifacts, rather than run them otherwise."""
    lane = (entry.options or {}).get("lane") if entry is not None else None
    if lane and lane in runtime.lanes and getattr(runtime.lanes.get(lane), "runner", None) is not None:
        return str(lane)
    return None
