"""Entry point of wbcore-brokers-state. Imports nothing heavy: each driver opens its database on first use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.records import Broker


def _kv(runtime: Any) -> Any:
    from wbcore_brokers_state.kv import KvBroker

    return KvBroker(runtime.home / "brokers" / "kv.db")


def _queue(runtime: Any) -> Any:
    from wbcore_brokers_state.queue import QueueBroker

    return QueueBroker(runtime.home / "brokers" / "queue.db")


def _vfs(runtime: Any) -> Any:
    from wbcore_brokers_state.vfs import VfsBroker

    return VfsBroker(runtime.home / "vfs")


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="kv", summary="durable per-tenant K/V (value <= 1 MiB, <= 10k keys)", factory=_kv,
                 operations=("get", "put", "delete", "list", "count"))
    yield Broker(name="queue", summary="per-tenant FIFO queues (message <= 256 KiB, depth <= 1000)", factory=_queue,
                 operations=("push", "pop", "peek", "depth"))
    yield Broker(name="vfs", summary="per-instance SQLite VFS: volumes workspace/memory/tmp; vfs-query", factory=_vfs,
                 operations=("read", "write", "delete", "list", "stat", "query"))
