"""secrets: sign only, tenant-scoped, no way to read the key."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from nacl.signing import VerifyKey

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound


@pytest.fixture
def rt(make_runtime):
    return make_runtime(plugins=["brokers-secrets"])


def test_sign_hmac_and_ed25519_without_reading(rt, wb_home):
    store = rt.dock.driver("secrets").store
    store.put("acme", "webhook", b"k" * 32)
    store.put("acme", "id", b"s" * 32, alg="ed25519")
    c = rt.dock.context(principal=Principal("acme", "signer"), caps={"secrets"})
    got = rt.dock.call(c, "secrets", "sign", {"name": "webhook", "message": b"payload"})
    assert got["signature"] == hmac.new(b"k" * 32, b"payload", hashlib.sha256).digest()
    sig = rt.dock.call(c, "secrets", "sign", {"name": "id", "message": "hello"})["signature"]
    pub = rt.dock.call(c, "secrets", "public_key", {"name": "id"})["public_key"]
    VerifyKey(pub).verify(b"hello", sig)
    with pytest.raises(InvalidArgs, match="unknown secrets operation 'get'"):
        rt.dock.call(c, "secrets", "get", {"name": "webhook"})
    other = rt.dock.context(principal=Principal("evil", "signer"), caps={"secrets"})
    with pytest.raises(NotFound):
        rt.dock.call(other, "secrets", "sign", {"name": "webhook", "message": b"x"})
    rt.dock.audit.flush()  # the audit writes in batches
    assert "k" * 32 not in (wb_home / "audit" / "audit.jsonl").read_text()
    assert "kkkk" not in repr(store)
    assert (wb_home / "brokers" / "secrets.db").stat().st_mode & 0o077 == 0


def test_wbx_secrets_set_and_list(wbx, wb_home):
    r = wbx("secrets", "set", "api", "--tenant", "acme", input=b"topsecret")
    assert r.exit_code == 0, r.stderr
    r = wbx("secrets", "list", "--tenant", "acme")
    assert "api  hmac-sha256" in r.stdout and "topsecret" not in r.stdout
