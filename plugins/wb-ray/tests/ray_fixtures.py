"""A runtime with guests registered, and a 2-node Ray cluster on loopback (real raylets)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: kernel: ASCII upper-case (in_off 1024, out_off 65536)
K_UPPER = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (local $i i32) (local $c i32)
    (block $e (loop $l
      (br_if $e (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $c (i32.load8_u offset=1024 (local.get $i)))
      (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
        (then (local.set $c (i32.sub (local.get $c) (i32.const 32)))))
      (i32.store8 offset=65536 (local.get $i) (local.get $c))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.get $n)))"""

#: command: stdin → stdout; traps when stdin starts with "!"
ECHO = """(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "_start") (local $n i32)
    (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $n (i32.load (i32.const 8)))
    (if (i32.and (i32.gt_u (local.get $n) (i32.const 0)) (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 33)))
      (then unreachable))
    (i32.store (i32.const 16) (i32.const 1024)) (i32.store (i32.const 20) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))))"""

#: Each node's object store (Ray's minimum is 75 MiB): the cluster stays small.
OBJECT_STORE = 80 << 20


@pytest.fixture
def rt(make_runtime: Callable[..., Any]) -> Any:
    runtime = make_runtime()
    if "command" not in runtime.shapes or "kernel" not in runtime.shapes:
        pytest.skip("needs the command and kernel shapes' runners (pip install wb-wasmtime)")
    return runtime


@pytest.fixture
def register(rt: Any) -> Callable[..., Any]:
    def reg(name: str, wat: str, kind: str = "command") -> Any:
        import wasmtime

        from wbcore.registry import Entry

        art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat)))
        return rt.registry.register(Entry(kind=kind, name=name, sha256=art.sha256, shape=kind, toolkit=None))

    return reg


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A Ray cluster of two nodes on this machine — a head and a worker node, each its own
    raylet and object store, one CPU each — that the driver joins by ``WB_RAY_ADDRESS``;
    shut down, and the nodes' homes removed, after the module's tests."""
    import os
    import shutil

    import ray
    from ray.cluster_utils import Cluster
    from wb_ray.actor import node_home

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
