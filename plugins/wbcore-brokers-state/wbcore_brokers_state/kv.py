"""The ``kv`` cap (StorageBroker): durable per-tenant K/V that survives the instance."""

from __future__ import annotations

import time

from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound

MAX_VALUE = 1 << 20
MAX_KEYS = 10_000
MAX_KEY = 1024
MAX_LIST = 1000
#: The read cache: values up to CACHE_ITEM bytes, CACHE_BYTES in all per process.
CACHE_ITEM = 64 << 10
CACHE_BYTES = 8 << 20

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
  tenant TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, updated REAL NOT NULL,
  PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
"""


def value_bytes(call: BrokerCall, name: str, cap: int, what: str) -> bytes:
    v = call.args.get(name)
    if isinstance(v, str):
        v = v.encode()
    if not isinstance(v, (bytes, bytearray)):
        raise InvalidArgs(f"{call.cap}.{call.op}: argument {name!r} must be bytes or text")
    if len(v) > cap:
        raise refuse(InvalidArgs, "too-large",
                     f"{call.cap}.{call.op}: {what} of {len(v)} bytes exceeds the {cap}-byte cap; nothing "
                     "was stored")
    return bytes(v)


class KvBroker:
    """Reads are served from a per-process cache while the database's change counter
    (``kv.db.changes``, bumped by every committed write in any process) is unchanged: a
    ``get`` of a value read before is a dict lookup and a counter read (stat + pread), not a SQLite query.
    An entry is stored only if the counter did not move while it was read, so a value is
    never served after a write that committed before the read began."""

    def __init__(self, path: Path, *, max_keys: int = MAX_KEYS, max_value: int = MAX_VALUE,
                 quota: Any = None) -> None:
        from wbcore_brokers_state.db import Db

        self.db = Db(path, SCHEMA, changes=True)
        self.max_keys, self.max_value = max_keys, max_value
        self.quota = quota  # wbcore_brokers_state.quota.TenantQuota, or None
        # (tenant, key) -> (counter value it was read at, value): an entry is served only
        # at its own counter value, so threads racing a clear cannot plant a stale one
        self._cache: dict[tuple[str, str], tuple[int, bytes]] = {}
        self._cache_gen = -1
        self._cache_bytes = 0

    def _cached(self, tenant: str, key: str) -> bytes | None:
        changes = self.db.changes
        if changes is None:
            return None
        g = changes.value()
        if g != self._cache_gen:
            self._cache, self._cache_gen, self._cache_bytes = {}, g, 0
            return None
        hit = self._cache.get((tenant, key))
        return hit[1] if hit is not None and hit[0] == g else None

    def _remember(self, tenant: str, key: str, value: bytes, gen: int) -> None:
        changes = self.db.changes
        if changes is None or len(value) > CACHE_ITEM or changes.value() != gen:
            return  # a write committed meanwhile (or no counter): not cached
        if self._cache_bytes + len(value) > CACHE_BYTES:
            self._cache, self._cache_bytes = {}, 0
        self._cache[(tenant, key)] = (gen, value)
        self._cache_bytes += len(value)

    def _key(self, call: BrokerCall) -> str:
        key = call.arg("key", str)
        if not key or len(key.encode()) > MAX_KEY:
            raise InvalidArgs(f"kv.{call.op}: key must be 1..{MAX_KEY} bytes of text")
        return key

    def handle(self, call: BrokerCall) -> Any:
        tenant = call.ctx.principal.tenant
        op = call.op
        if op == "get":
            key = self._key(call)
            budget = ByteBudget.for_call(call, None, "kv.get")
            hit = self._cached(tenant, key)
            if hit is not None:
                budget.take(len(hit))
                return {"value": hit}
            gen = self._cache_gen
            with self.db.read() as c:  # the length first: a value over the budget is never loaded
                row = c.execute("SELECT length(value), CASE WHEN length(value) <= ? THEN value END FROM kv "
                                "WHERE tenant=? AND key=?",
                                (budget.left, tenant, key)).fetchone()
            if row is None:
                raise NotFound(f"kv.get: no key {key!r}")
            budget.take(row[0])
            self._remember(tenant, key, row[1], gen)
            return {"value": row[1]}
        if op == "put":
            key = self._key(call)
            value = value_bytes(call, "value", self.max_value, "value")
            taken = 0
            try:
                with self.db.write() as c:
                    exists = c.execute("SELECT length(value) FROM kv WHERE tenant=? AND key=?",
                                       (tenant, key)).fetchone()
                    if not exists:
                        (n,) = c.execute("SELECT count(*) FROM kv WHERE tenant=?", (tenant,)).fetchone()
                        if n >= self.max_keys:
                            raise refuse(CapabilityDenied, "quota",
                                         f"kv.put: tenant {tenant!r} already holds {n} keys (cap "
                                         f"{self.max_keys}); nothing was stored")
                    delta = len(value) - (exists[0] if exists else -len(key.encode()))
                    # the tenant's disk quota, inside this write: refused = rolled back
                    if self.quota is not None:
                        self.quota.take(tenant, "kv", delta, "kv.put")
                        taken = delta
                    c.execute("INSERT OR REPLACE INTO kv VALUES (?,?,?,?)", (tenant, key, value, time.time()))
            except BaseException:
                if taken > 0 and self.quota is not None:
                    self.quota.take(tenant, "kv", -taken, "kv.put")
                raise
            return {"ok": True, "created": not exists}
        if op == "delete":
            key = self._key(call)
            with self.db.write() as c:
                row = c.execute("SELECT length(value) FROM kv WHERE tenant=? AND key=?",
                                (tenant, key)).fetchone()
                n = c.execute("DELETE FROM kv WHERE tenant=? AND key=?", (tenant, key)).rowcount
            if row and self.quota is not None:
                self.quota.take(tenant, "kv", -(row[0] + len(key.encode())), "kv.delete")
            return {"deleted": bool(n)}
        if op == "list":
            prefix = call.arg("prefix", str, "")
            limit = min(call.arg("limit", int, MAX_LIST), MAX_LIST)
            if limit < 0:  # SQLite reads a negative LIMIT as none at all
                raise InvalidArgs(f"kv.list: 'limit' must be 0..{MAX_LIST}, got {limit}; page on with "
                                  "'after'")
            after = call.arg("after", str, "")
            budget = ByteBudget.for_call(call, None, "kv.list")
            keys = []
            with self.db.read() as c:
                cur = c.execute("SELECT key FROM kv WHERE tenant=? AND key > ? AND substr(key, 1, ?) = ? "
                                "ORDER BY key LIMIT ?",
                                (tenant, after, len(prefix), prefix, limit))
                while (row := cur.fetchone()) is not None:
                    budget.take(ByteBudget.size_of(row[0]))
                    keys.append(row[0])
            return {"keys": keys}
        if op == "count":
            with self.db.read() as c:
                (n,) = c.execute("SELECT count(*) FROM kv WHERE tenant=?", (tenant,)).fetchone()
            return {"count": n, "cap": self.max_keys}
        raise InvalidArgs(f"kv: unknown operation {op!r}")
