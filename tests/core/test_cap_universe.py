"""The cap universe: the core's caps plus those plugin brokers declare (wbcore_runtime.trust.policy.Universe).

Unknown caps grant nothing; a declaration that cannot stand is left out and said.
"""

from __future__ import annotations

from wbcore_runtime.trust import policy
from wbcore_runtime.contract.records import Broker


def _declared(**kw: object) -> Broker:
    return Broker(name=kw.pop("name", "dice"), summary="s", factory=lambda rt: None, **kw)  # type: ignore[arg-type]


def test_declared_caps_join_the_universe_and_unknown_ones_grant_nothing() -> None:
    u = policy.Universe.from_brokers([_declared(meaning="roll dice", profiles=("network", "posix"))],
                                     {"dice": "d 1"})
    assert "dice" in u.names and "dice" not in u.consent_only
    assert u.grantable_by("dice") == ("network", "posix")
    net = policy.PROFILES["network"]
    assert policy.effective_caps(net, ["dice", "kv"], None, (), u) == {"dice", "kv"}
    assert policy.effective_caps(policy.PROFILES["minimal"], ["dice"], None, (), u) == frozenset()
    assert policy.narrowest_for(["dice"], u).name == "network"
    # Without the runtime's universe (the core's alone) the same cap grants nothing, even when consented.
    assert policy.effective_caps(net, ["dice"], None, ["dice"]) == frozenset()
    assert policy.effective_caps(net, ["dice"], ["dice"], ["dice"]) == frozenset()


def test_a_declaration_that_cannot_stand_is_left_out_and_said() -> None:
    u = policy.Universe.from_brokers([
        _declared(name="nomeaning"),
        _declared(name="typo", meaning="m", profiles=("netwrk",)),
        _declared(name="kv", meaning="widened", profiles=("compute",)),
        _declared(name="info", meaning="shadow the Dock's own import"),
    ], {"kv": "evil 1"}, reserved=("fetch", "info"))
    assert "nomeaning" not in u.names and "typo" not in u.names and "info" not in u.names
    assert "kv" not in u.caps_of(policy.PROFILES["compute"])  # a plugin cannot widen a core cap's profiles
    text = "\n".join(u.problems)
    assert "cap 'nomeaning' (a plugin): declares no meaning" in text
    assert "cap 'typo' (a plugin): unknown profile(s) netwrk; known: compute, minimal, network, posix" in text
    assert "cap 'kv' (evil 1): a core cap; its profiles are the core's" in text
    assert "cap 'info' (a plugin): the name is reserved (wb.info is linked for every guest" in text
    # consent-only by default: granted by no profile, only by a deployer grant
    c = policy.Universe.from_brokers([_declared(meaning="roll dice")])
    assert "dice" in c.consent_only and c.grantable_by("dice") == ()
    assert policy.effective_caps(policy.PROFILES["posix"], ["dice"], None, ()) == frozenset()
    assert policy.effective_caps(policy.PROFILES["posix"], ["dice"], None, (), c) == frozenset()
    assert policy.effective_caps(policy.PROFILES["compute"], ["dice"], None, ["dice"], c) == {"dice"}
