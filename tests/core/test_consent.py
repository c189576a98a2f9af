"""Consent grants, effective caps (profile ∩ declared ∩ granted) and #+SHA256 integrity."""

from __future__ import annotations

import base64
import hashlib

import pytest

from wbcore_runtime.trust import consent, verdict as trust
from wbcore_runtime.store.registry import Entry

SEED0 = base64.b64encode(bytes(32)).decode()
SEED1 = base64.b64encode(bytes(31) + b"\x01").decode()
WASM = b"\0asm\x01\0\0\0"


def test_first_party_runs_under_profile_defaults(make_toolkit, make_runtime):
    make_toolkit("fp", caps="net kv")
    rt = make_runtime()
    assert rt.effective_caps(rt.toolkit("fp")) == frozenset({"net", "kv"})
    make_toolkit("unknowncap", caps="vfs warp")
    rt = make_runtime()
    assert rt.effective_caps(rt.toolkit("unknowncap")) == frozenset({"vfs"})


def test_store_survives_and_rejects_garbage(wb_home):
    store = consent.ConsentStore(wb_home)
    store.grant("x", ["net"], "did:key:z")
    (wb_home / "consent.json").write_text("{not json")
    with pytest.raises(Exception, match="not a consent file"):
        store.load()


# --- integrity ------------------------------------------------------------------------


def test_sha256_pin_against_the_registered_artifact(make_toolkit, make_runtime):
    good = hashlib.sha256(WASM).hexdigest()
    make_toolkit("reg", exec="command", extra={"CLI_BIN": "regtool", "SHA256": good})
    rt = make_runtime()
    rt.registry.register(Entry("command", "regtool", good, "command", toolkit="reg"))
    assert trust.unavailable_reason(rt.toolkit("reg"), rt) is None
    rt.registry.register(Entry("command", "regtool", "0" * 64, "command", toolkit="reg"))
    assert "registered command 'regtool'" in (trust.unavailable_reason(rt.toolkit("reg"), rt) or "")
    trust.check_digest(rt.toolkit("reg").manifest, good)
    with pytest.raises(trust.IntegrityError):
        trust.check_digest(rt.toolkit("reg").manifest, "0" * 64)


def test_no_pin_means_no_check(make_toolkit, make_runtime, tmp_path):
    make_toolkit("free")
    rt = make_runtime()
    (tmp_path / "x.wasm").write_bytes(b"anything")
    trust.check_artifact(rt.toolkit("free").manifest, tmp_path / "x.wasm")
    assert trust.unavailable_reason(rt.toolkit("free"), rt) is None


def test_env_grants_name_each_variable_and_show_in_dry_run_diffs(tmp_path):
    """A manifest's deployer variables need a grant naming each (issue 22 item 5)."""
    from types import SimpleNamespace

    from wbcore_runtime.trust.consent import ConsentStore, check_env, env_granted, requested_env
    from wbcore_runtime.contract.errors import CapabilityDenied
    from wbcore_runtime.contract.installs import Change

    m = SimpleNamespace(id="fed", trust="first-party", author_did=None,
                        extra=lambda k, d=None: {"AUTH": "bearer-env TOKEN_A",
                                                 "ENV_KEYS": "TOKEN_B"}.get(k, d))
    tk = SimpleNamespace(id="fed", manifest=m)
    assert requested_env(m) == ["TOKEN_A", "TOKEN_B"]
    with pytest.raises(CapabilityDenied, match="wbx toolkit grant fed --env TOKEN_A"):
        check_env(tmp_path, tk, "TOKEN_A")
    store = ConsentStore(tmp_path)
    store.grant("fed", [], None, env=["TOKEN_A"])
    check_env(tmp_path, tk, "TOKEN_A")
    with pytest.raises(CapabilityDenied):
        check_env(tmp_path, tk, "TOKEN_B")
    assert env_granted(tmp_path, tk) == {"TOKEN_A"}
    store.revoke("fed", env=["TOKEN_A"])
    assert env_granted(tmp_path, tk) == frozenset()
    change = Change("fed", "new", (None, "1.0"), (None, ("net",)), (None, "third-party"), (None, None),
                    env=("TOKEN_A",))
    assert any("reads the deployer's TOKEN_A" in line and "--env TOKEN_A" in line for line in change.lines())
