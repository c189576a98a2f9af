"""The tenant disk quota: one ledger of the bytes each tenant holds across vfs, kv and queue.

``$WB_HOME/brokers/usage.db`` keeps ``(tenant, scope) → bytes``; a scope is ``kv``,
``queue`` or ``vfs:<instance>`` (an agent run's state and workspace are its instance's).
A write first :meth:`TenantQuota.take`\\ s its growth — refused with capability-denied,
reason ``quota``, when the tenant's total would pass the limit — and gives it back if the
write then fails; a delete, a pop, a resume's emptied ``tmp`` volume or a released call
instance gives its bytes back. The limit is ``WB_TENANT_QUOTA`` (bytes, or with a K/M/G
suffix; default 1 GiB, ``0``: no quota), the same for every tenant. Data written before
the ledger existed is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs

DEFAULT_QUOTA = 1 << 30
SETTING = "WB_TENANT_QUOTA"
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
  tenant TEXT NOT NULL, scope TEXT NOT NULL, bytes INTEGER NOT NULL,
  PRIMARY KEY (tenant, scope)
) WITHOUT ROWID;
"""


def limit_from(env: Mapping[str, str]) -> int:
    """``WB_TENANT_QUOTA`` in bytes (0: no quota); a malformed value is a clear error."""
    raw = env.get(SETTING, "")
    if not raw.strip():
        return DEFAULT_QUOTA
    m = _SIZE.match(raw)
    if m is None:
        raise InvalidArgs(f"{SETTING}={raw!r}: expected bytes, optionally with K, M or G (e.g. 512M); 0 "
                          "turns it off")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


class TenantQuota:
    def __init__(self, path: Path, limit: int) -> None:
        from wbcore_brokers_state.db import Db

        self.db = Db(path, SCHEMA)
        self.limit = limit

    def used(self, tenant: str) -> int:
        with self.db.read() as c:
            (n,) = c.execute("SELECT coalesce(sum(bytes), 0) FROM usage WHERE tenant=?", (tenant,)).fetchone()
        return int(n)

    def take(self, tenant: str, scope: str, delta: int, what: str) -> None:
        """Count ``delta`` bytes (negative: given back) for ``tenant`` in ``scope``; growth
        past the limit is refused and nothing is counted."""
        if delta == 0:
            return
        with self.db.write() as c:
            if delta > 0 and self.limit:
                (n,) = c.execute("SELECT coalesce(sum(bytes), 0) FROM usage WHERE tenant=?",
                                 (tenant,)).fetchone()
                if n + delta > self.limit:
                    raise refuse(CapabilityDenied, "quota",
                                 f"{what}: tenant {tenant!r} holds {n} bytes; {delta} more would pass its "
                                 f"disk quota of {self.limit} bytes ({SETTING}); delete something or ask the "
                                 "deployer to raise it. Nothing was written")
            c.execute("INSERT INTO usage VALUES (?,?,max(0,?)) ON CONFLICT (tenant, scope) "
                      "DO UPDATE SET bytes=max(0, bytes + excluded.bytes)" if delta > 0 else
                      "UPDATE usage SET bytes=max(0, bytes + ?) WHERE tenant=? AND scope=?",
                      (tenant, scope, delta) if delta > 0 else (delta, tenant, scope))

    @contextmanager
    def growing(self, tenant: str, scope: str, delta: int, what: str) -> Iterator[None]:
        """:meth:`take` ``delta`` before the write in the block; given back if it fails."""
        self.take(tenant, scope, delta, what)
        try:
            yield
        except BaseException:
            if delta > 0:
                self.take(tenant, scope, -delta, what)
            raise

    def give_back(self, scope: str, n: int) -> None:
        """Uncount ``n`` bytes ``scope`` no longer holds, whoever wrote them (a resumed vfs
        instance's ``tmp`` volume; an instance is one run's, so one tenant's)."""
        with self.db.write() as c:
            c.execute("UPDATE usage SET bytes=max(0, bytes - ?) WHERE scope=?", (n, scope))

    def drop_scope(self, scope: str) -> None:
        """Forget a scope (a released vfs instance): its bytes no longer count."""
        with self.db.write() as c:
            c.execute("DELETE FROM usage WHERE scope=?", (scope,))
