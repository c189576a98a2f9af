"""Capability profiles (seed 004 "Capability profiles") and fail-closed resolution.

A profile fixes memory, wall-clock timeout and the caps a guest may be granted.
An unknown or misspelled profile resolves to ``compute`` (vfs only), never a wider
one. The effective cap set of a call is profile ∩ ``#+CAPS`` ∩ consent grants.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records load with verify, not with every call's resolution
    from wbcore_runtime.records import Check

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    memory_bytes: int
    timeout_s: float
    caps: frozenset[str]
    stdout_bytes: int = 16 * MiB
    stderr_bytes: int = 1 * MiB

    @property
    def allow_http(self) -> bool:
        """High-level egress only where the profile grants ``net`` or ``browse``."""
        return bool(self.caps & {"net", "browse"})


_COMPUTE = frozenset({"vfs"})
_MINIMAL = _COMPUTE | {"commands", "exec", "kv", "secrets", "queue", "tcp", "udp", "tls"}
_NETWORK = _MINIMAL | {"net", "llm", "browse"}
_POSIX = _NETWORK | {"posix", "parallel"}

PROFILES: dict[str, Profile] = {
    "compute": Profile("compute", 64 * MiB, 5.0, _COMPUTE),
    "minimal": Profile("minimal", 64 * MiB, 5.0, _MINIMAL),
    "network": Profile("network", 128 * MiB, 30.0, _NETWORK),
    "posix": Profile("posix", 256 * MiB, 60.0, _POSIX, stdout_bytes=64 * MiB),
}
#: Narrowest first: the order in which a toolkit's default profile is chosen.
PROFILE_ORDER = ("compute", "minimal", "network", "posix")
#: Caps no profile grants: they reach a guest only through an explicit deployer grant
#: (``wbx toolkit grant``), whatever the toolkit's trust.
CONSENT_ONLY: frozenset[str] = frozenset({"build", "serve"})
#: Every cap that can be granted at all.
CAP_UNIVERSE: frozenset[str] = _POSIX | CONSENT_ONLY
FAIL_CLOSED = "compute"


def profile(name: str | None) -> Profile:
    """Resolve a profile name; anything unknown is ``compute`` (fail-closed)."""
    return PROFILES.get((name or "").strip(), PROFILES[FAIL_CLOSED])


def narrowest_for(caps: Iterable[str]) -> Profile:
    """The narrowest profile granting every known cap in ``caps`` (else ``compute``).
    Consent-only caps do not count: no profile grants them."""
    wanted = set(caps) & (CAP_UNIVERSE - CONSENT_ONLY)
    for name in PROFILE_ORDER:
        if wanted <= PROFILES[name].caps:
            return PROFILES[name]
    return PROFILES[FAIL_CLOSED]


def profile_for(declared_profile: str | None, caps: Iterable[str]) -> Profile:
    if declared_profile:
        return profile(declared_profile)
    return narrowest_for(caps)


def effective_caps(
    prof: Profile,
    declared: Iterable[str],
    granted: Iterable[str] | None,
    consented: Iterable[str] = (),
) -> frozenset[str]:
    """profile ∩ declared ∩ granted; ``granted=None`` means first-party (no consent step).

    ``consented`` are explicit deployer grants; of those, the consent-only caps
    (:data:`CONSENT_ONLY`) are added when declared, since no profile ever grants them.
    """
    declared = frozenset(declared)
    eff = prof.caps & declared
    if granted is not None:
        eff &= frozenset(granted)
    return eff | (CONSENT_ONLY & declared & frozenset(consented))


def cap_checks(caps: Iterable[str]) -> list[Check]:
    from wbcore_runtime.records import Check

    caps = list(caps)
    if not caps:
        return [Check(True, "caps", "none declared (pure compute + stdio)")]
    checks: list[Check] = []
    unknown = [c for c in caps if c not in CAP_UNIVERSE]
    if unknown:
        checks.append(Check(False, "caps", f"unknown cap(s): {', '.join(unknown)}; known: {', '.join(sorted(CAP_UNIVERSE))}"))
    known = [c for c in caps if c in CAP_UNIVERSE]
    if known:
        consent_only = [c for c in known if not any(c in p.caps for p in PROFILES.values())]
        profiled = [c for c in known if c not in consent_only]
        whole = [n for n in PROFILE_ORDER if set(profiled) <= PROFILES[n].caps]
        if whole or not profiled:
            where = f"profile {whole[0]}" if whole else "deployer consent"
            checks.append(Check(True, "caps", f"{' '.join(known)} grantable ({where})"))
        else:
            checks.append(Check(False, "caps", f"no single profile grants all of: {' '.join(profiled)}"))
        if consent_only:
            checks.append(Check(True, "caps", f"{' '.join(consent_only)} granted only by explicit consent", warning=True))
    return checks
