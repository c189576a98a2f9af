"""The ``queue`` cap (QueueBroker): per-tenant FIFO message queues between guests.

A queue holds at most ``MAX_DEPTH`` messages, and a tenant at most ``MAX_TENANT_MESSAGES``
across all its queue names (names are free, so the cap is the tenant's, not the name's);
their bytes count toward the tenant's disk quota (``wbcore_brokers_state.quota``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs

from wbcore_brokers_state.kv import value_bytes

MAX_MESSAGE = 256 << 10
MAX_DEPTH = 1000
MAX_TENANT_MESSAGES = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant TEXT NOT NULL, queue TEXT NOT NULL, body BLOB NOT NULL, enqueued REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_fifo ON messages (tenant, queue, id);
"""


class QueueBroker:
    def __init__(self, path: Path, *, max_depth: int = MAX_DEPTH, max_message: int = MAX_MESSAGE,
                 max_tenant: int = MAX_TENANT_MESSAGES, quota: Any = None) -> None:
        from wbcore_brokers_state.db import Db

        self.db = Db(path, SCHEMA)
        self.max_depth, self.max_message, self.max_tenant = max_depth, max_message, max_tenant
        self.quota = quota  # wbcore_brokers_state.quota.TenantQuota, or None

    def handle(self, call: BrokerCall) -> Any:
        import time

        tenant = call.ctx.principal.tenant
        queue = call.arg("queue", str, "default")
        if not queue or len(queue) > 256:
            raise InvalidArgs("queue: the queue name must be 1..256 characters")
        if call.op == "push":
            body = value_bytes(call, "message", self.max_message, "message")
            taken = 0
            try:
                with self.db.write() as c:
                    (depth,) = c.execute("SELECT count(*) FROM messages WHERE tenant=? AND queue=?",
                                         (tenant, queue)).fetchone()
                    if depth >= self.max_depth:
                        raise refuse(CapabilityDenied, "queue-full",
                                     f"queue.push: queue {queue!r} is full ({depth} messages, cap "
                                     f"{self.max_depth}); nothing was queued")
                    (total,) = c.execute("SELECT count(*) FROM messages WHERE tenant=?", (tenant,)).fetchone()
                    if total >= self.max_tenant:
                        raise refuse(CapabilityDenied, "quota",
                                     f"queue.push: tenant {tenant!r} holds {total} messages across its "
                                     f"queues (cap {self.max_tenant}); nothing was queued")
                    if self.quota is not None:
                        self.quota.take(tenant, "queue", len(body), "queue.push")
                        taken = len(body)
                    cur = c.execute("INSERT INTO messages (tenant, queue, body, enqueued) VALUES (?,?,?,?)",
                                    (tenant, queue, body, time.time()))
            except BaseException:
                if taken and self.quota is not None:
                    self.quota.take(tenant, "queue", -taken, "queue.push")
                raise
            return {"id": cur.lastrowid, "depth": depth + 1}
        if call.op in ("pop", "peek"):
            budget = ByteBudget.for_call(call, None, f"queue.{call.op} {queue!r}")
            ctx = self.db.write() if call.op == "pop" else self.db.read()
            with ctx as c:  # the length first: a message the answer cannot carry stays queued, unloaded
                row = c.execute("SELECT id, length(body), CASE WHEN length(body) <= ? THEN body END FROM "
                                "messages WHERE tenant=? AND queue=? ORDER BY id LIMIT 1",
                                (budget.left, tenant, queue)).fetchone()
                if row is not None:
                    budget.take(row[1])
                    if call.op == "pop":
                        c.execute("DELETE FROM messages WHERE id=?", (row[0],))
            if row is not None and call.op == "pop" and self.quota is not None:
                self.quota.take(tenant, "queue", -row[1], "queue.pop")
            return {"id": row[0], "message": row[2]} if row else {"id": None, "message": None}
        if call.op == "depth":
            with self.db.read() as c:
                (depth,) = c.execute("SELECT count(*) FROM messages WHERE tenant=? AND queue=?",
                                     (tenant, queue)).fetchone()
            return {"depth": depth, "cap": self.max_depth}
        raise InvalidArgs(f"queue: unknown operation {call.op!r}")
