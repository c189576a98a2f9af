"""NetGuard for the egress brokers: the core's SSRF decision (:mod:`wbcore_runtime.guard.netguard`), as is.

The decision — which addresses are public, resolve-then-pin, every answer checked, host
literals parsed like ``inet_aton`` — lives in the core, so the brokers, sources, installs
and did:web cannot drift apart. What is broker-specific is only the policy
``NetGuard.for_guests`` gives: a guest's egress never gets the deployer's private-source
allowances (``WB_ALLOW_PRIVATE_SOURCES`` / ``WB_ALLOW_PRIVATE_HOSTS`` are read by
``NetGuard.from_env``, which the brokers do not use), only the hosts and networks named in
``WB_NET_ALLOW_PRIVATE_HOSTS``; and a name that does not resolve is a denial (reason
``ssrf``), not a DNS error a guest could probe with.

Test seam (never used by the product): ``NetGuard(resolver=..., public=...)``, see the core module.
"""

from __future__ import annotations

from wbcore_runtime.guard.netguard import (IPAddress, NetGuard, Pin, Resolver, parse_literal, system_resolver,
                                           why_denied)

__all__ = ["IPAddress", "NetGuard", "Pin", "Resolver", "parse_literal", "system_resolver", "why_denied"]
