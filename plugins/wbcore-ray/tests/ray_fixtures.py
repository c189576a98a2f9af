"""A runtime with guests registered, and a 2-node Ray cluster on loopback (real raylets)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wbcore_testing.fixtures import ECHO_OR_TRAP as ECHO  # noqa: F401 (the suite's tests import them from here)
from wbcore_testing.fixtures import K_UPPER, register_wat  # noqa: F401

#: Each node's object store (Ray's minimum is 75 MiB): the cluster stays small.
OBJECT_STORE = 80 << 20


@pytest.fixture
def rt(make_runtime: Callable[..., Any]) -> Any:
    runtime = make_runtime()
    if "command" not in runtime.shapes or "kernel" not in runtime.shapes:
        pytest.skip("needs the command and kernel shapes' runners (pip install wbcore-wasmtime)")
    return runtime


@pytest.fixture
def register(rt: Any) -> Callable[..., Any]:
    """``register(name, wat, kind="command") -> Entry`` on ``rt``."""
    import wasmtime

    return functools.partial(register_wat, rt, wat2wasm=wasmtime.wat2wasm)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A Ray cluster of two nodes on this machine — a head and a worker node, each its own
    raylet and object store, one CPU each — that the driver joins by ``WB_RAY_ADDRESS``;
    shut down, and the nodes' homes removed, after the module's tests."""
    import os
    import shutil

    import ray
    from ray.cluster_utils import Cluster
    from wbcore_ray.actor import node_home

    if ray.is_initialized():
        ray.shutdown()
    old = {k: os.environ.pop(k, None) for k in ("WB_RAY_ADDRESS", "WB_RAY_NODE_HOME", "RAY_ADDRESS")}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": OBJECT_STORE, "include_dashboard": False})
    ids: list[str] = []
    try:
        cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes(timeout=120)
        os.environ["WB_RAY_ADDRESS"] = cluster.address
        yield cluster
        ids = [n["NodeID"] for n in ray.nodes()] if ray.is_initialized() else []
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        for nid in ids:
            shutil.rmtree(node_home(nid), ignore_errors=True)
        os.environ.pop("WB_RAY_ADDRESS", None)
        for k, v in old.items():
            if v is not None:
                os.environ[k] = v
