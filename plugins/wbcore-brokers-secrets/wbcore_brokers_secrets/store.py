"""Tenant-scoped secrets in ``$WB_HOME/brokers/secrets.db`` (mode 0600) and the sign broker.

The broker's operations are ``sign`` (HMAC-SHA256 or Ed25519 over a message),
``public_key`` (Ed25519 only: the public half is not secret) and ``names``. There is
no operation that returns key material, and neither reprs nor error messages carry it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import InvalidArgs, NotFound

ALGS = ("hmac-sha256", "ed25519")
MAX_MESSAGE = 16 << 20
MAX_SECRET = 4096
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS secrets (
  tenant TEXT NOT NULL, name TEXT NOT NULL, alg TEXT NOT NULL, key BLOB NOT NULL, created REAL NOT NULL,
  PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
"""


class SecretStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(SCHEMA)

    def __repr__(self) -> str:
        return f"SecretStore({self.path})"

    def put(self, tenant: str, name: str, key: bytes, alg: str = "hmac-sha256") -> None:
        """Store (or replace) a secret. Ed25519 keys are 32-byte seeds."""
        if not _NAME.match(name):
            raise InvalidArgs(f"secret name {name!r} must match {_NAME.pattern}")
        if alg not in ALGS:
            raise InvalidArgs(f"unknown secret algorithm {alg!r}; known: {', '.join(ALGS)}")
        if alg == "ed25519" and len(key) != 32:
            raise InvalidArgs("an ed25519 secret is a 32-byte seed")
        if not 0 < len(key) <= MAX_SECRET:
            raise InvalidArgs(f"a secret is 1..{MAX_SECRET} bytes")
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO secrets VALUES (?,?,?,?,?)",
                               (tenant, name, alg, key, time.time()))

    def delete(self, tenant: str, name: str) -> bool:
        with self._lock:
            return bool(self._conn.execute("DELETE FROM secrets WHERE tenant=? AND name=?",
                                           (tenant, name)).rowcount)

    def names(self, tenant: str) -> list[tuple[str, str]]:
        with self._lock:
            return [(n, a) for n, a in self._conn.execute(
                "SELECT name, alg FROM secrets WHERE tenant=? ORDER BY name", (tenant,))]

    def _key(self, tenant: str, name: str) -> tuple[str, bytes]:
        with self._lock:
            row = self._conn.execute("SELECT alg, key FROM secrets WHERE tenant=? AND name=?",
                                     (tenant, name)).fetchone()
        if row is None:
            raise NotFound(f"secrets: tenant {tenant!r} has no secret {name!r}")
        return row[0], bytes(row[1])

    def sign(self, tenant: str, name: str, message: bytes) -> tuple[str, bytes]:
        alg, key = self._key(tenant, name)
        if alg == "hmac-sha256":
            return alg, hmac.new(key, message, hashlib.sha256).digest()
        from nacl.signing import SigningKey

        return alg, SigningKey(key).sign(message).signature

    def public_key(self, tenant: str, name: str) -> bytes:
        alg, key = self._key(tenant, name)
        if alg != "ed25519":
            raise InvalidArgs(f"secrets.public_key: {name!r} is {alg}, which has no public half")
        from nacl.signing import SigningKey

        return bytes(SigningKey(key).verify_key)


class SecretBroker:
    def __init__(self, store: SecretStore) -> None:
        self.store = store

    def handle(self, call: BrokerCall) -> Any:
        tenant = call.ctx.principal.tenant
        if call.op == "names":
            return {"names": [{"name": n, "alg": a} for n, a in self.store.names(tenant)]}
        name = call.arg("name", str)
        if call.op == "public_key":
            return {"public_key": self.store.public_key(tenant, name), "alg": "ed25519"}
        if call.op == "sign":
            msg = call.args.get("message")
            if isinstance(msg, str):
                msg = msg.encode()
            if not isinstance(msg, bytes):
                raise InvalidArgs("secrets.sign: 'message' must be bytes or text")
            if len(msg) > MAX_MESSAGE:
                raise refuse(InvalidArgs, "too-large",
                             f"secrets.sign: message of {len(msg)} bytes exceeds {MAX_MESSAGE}")
            alg, sig = self.store.sign(tenant, name, msg)
            return {"signature": sig, "alg": alg}
        raise InvalidArgs(f"secrets: unknown operation {call.op!r}; there is no read operation")
