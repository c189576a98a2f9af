"""Entry point of wbcore-brokers-state. Imports nothing heavy: each driver opens its database on first use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _quota(runtime: Any) -> Any:
    """The tenant disk quota's ledger (one file per home, shared by the three brokers)."""
    from wbcore_brokers_state.quota import TenantQuota, limit_from

    return TenantQuota(runtime.home / "brokers" / "usage.db", limit_from(runtime.env))


def _kv(runtime: Any) -> Any:
    from wbcore_brokers_state.kv import KvBroker

    return KvBroker(runtime.home / "brokers" / "kv.db", quota=_quota(runtime))


def _queue(runtime: Any) -> Any:
    from wbcore_brokers_state.queue import QueueBroker

    return QueueBroker(runtime.home / "brokers" / "queue.db", quota=_quota(runtime))


def _vfs(runtime: Any) -> Any:
    from wbcore_brokers_state.vfs import VfsBroker

    return VfsBroker(runtime.home / "vfs", quota=_quota(runtime))


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="kv", summary="durable per-tenant K/V (value <= 1 MiB, <= 10k keys)", factory=_kv,
                 operations=("get", "put", "delete", "list", "count"))
    yield Broker(name="queue", summary="per-tenant FIFO queues (message <= 256 KiB, depth <= 1000)",
                 factory=_queue, operations=("push", "pop", "peek", "depth"))
    yield Broker(name="vfs", summary="per-instance SQLite VFS: volumes workspace/memory/tmp; vfs-query",
                 factory=_vfs, operations=("read", "write", "delete", "list", "stat", "query"))
