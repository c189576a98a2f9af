from __future__ import annotations

import pytest

from wbcore_runtime.trust import policy
from wbcore_runtime.toolkit.verify import cap_checks


@pytest.mark.parametrize("name", [None, "", "Compute", "minmal", "root", "posix ", "network\n"])
def test_unknown_profile_is_compute(name):
    p = policy.profile(name)
    if name and name.strip() in policy.PROFILES:
        assert p.name == name.strip()
    else:
        assert p.name == "compute" and p.caps == frozenset({"vfs"})


def test_profiles_match_the_seed():
    assert (policy.profile("minimal").caps
            == {"vfs", "commands", "exec", "kv", "secrets", "queue", "tcp", "udp", "tls"})
    assert policy.profile("network").caps == policy.profile("minimal").caps | {"net", "llm", "browse"}
    assert policy.profile("posix").caps == policy.profile("network").caps | {"posix", "parallel"}
    assert (policy.profile("network").memory_bytes, policy.profile("network").timeout_s) == (128 << 20, 30.0)


def test_allow_http_only_with_net_or_browse():
    assert not policy.profile("compute").allow_http
    assert not policy.profile("minimal").allow_http  # raw sockets, but no high-level egress
    assert policy.profile("network").allow_http


def test_narrowest_profile_and_effective_caps():
    assert policy.narrowest_for(["kv"]).name == "minimal"
    assert policy.narrowest_for(["net", "kv"]).name == "network"
    assert policy.narrowest_for(["bogus"]).name == "compute"
    net = policy.profile("network")
    assert policy.effective_caps(net, ["net", "kv", "posix", "bogus"], None) == {"net", "kv"}
    assert policy.effective_caps(net, ["net", "kv"], ["kv"]) == {"kv"}
    assert policy.effective_caps(net, ["net"], []) == frozenset()


def test_cap_checks():
    assert cap_checks([])[0].ok
    checks = cap_checks(["net", "warp-drive"])
    bad = [c for c in checks if not c.ok]
    assert len(bad) == 1 and "unknown cap(s): warp-drive" in bad[0].message
    good = cap_checks(["net", "kv"])
    assert all(c.ok for c in good) and "profile network" in good[0].message
