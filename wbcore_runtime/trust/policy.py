"""Capability profiles (seed 004 "Capability profiles") and fail-closed resolution.

A profile fixes memory, wall-clock timeout and the caps a guest may be granted.
An unknown or misspelled profile resolves to ``compute`` (vfs only), never a wider
one. The effective cap set of a call is profile ∩ ``#+CAPS`` ∩ consent grants.

The cap universe is the core's caps plus the caps plugin brokers declare
(``Broker(meaning=..., profiles=...)``), collected once per runtime into a
:class:`Universe` (``Runtime.cap_universe``). A name in neither grants nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wbcore_runtime.contract.frozen import Frozen, set_fields


MiB = 1 << 20


class Profile(Frozen):
    __slots__ = __match_args__ = ("name", "memory_bytes", "timeout_s", "caps", "stdout_bytes", "stderr_bytes")
    name: str
    memory_bytes: int
    timeout_s: float
    caps: frozenset[str]
    stdout_bytes: int
    stderr_bytes: int

    def __init__(self, name: str, memory_bytes: int, timeout_s: float, caps: frozenset[str],
                 stdout_bytes: int = 16 * MiB, stderr_bytes: int = 1 * MiB) -> None:
        set_fields(self, name=name, memory_bytes=memory_bytes, timeout_s=timeout_s, caps=caps,
                   stdout_bytes=stdout_bytes, stderr_bytes=stderr_bytes)

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
CONSENT_ONLY: frozenset[str] = frozenset({"build", "serve", "mount-rw"})
#: The cap a call needs before a deployer's ``--mount HOST:GUEST:rw`` may hand it a writable
#: host folder (read-only mounts need none: the deployer's own act grants them).
MOUNT_RW = "mount-rw"
#: The core's caps: every cap that can be granted without a plugin declaring it.
CAP_UNIVERSE: frozenset[str] = _POSIX | CONSENT_ONLY
FAIL_CLOSED = "compute"


class Cap(Frozen):
    """A cap a plugin declares: its ``meaning`` (one line) and the ``profiles`` that grant it
    (none: only an explicit deployer grant, ``wbx toolkit grant``, does)."""

    __slots__ = __match_args__ = ("name", "meaning", "profiles", "origin")
    name: str
    meaning: str
    profiles: tuple[str, ...]
    origin: str

    def __init__(self, name: str, meaning: str, profiles: tuple[str, ...], origin: str) -> None:
        set_fields(self, name=name, meaning=meaning, profiles=profiles, origin=origin)


class Universe:
    """The caps one runtime knows: the core's plus those its plugins' brokers declare.

    Built once per runtime (``Runtime.cap_universe``) from the broker records; a declaration
    that cannot stand (no meaning, an unknown profile, profiles for a core cap) is left out
    and listed in :attr:`problems`, so its cap stays unknown and grants nothing.
    """

    def __init__(self, declared: Iterable[Cap] = (), problems: Iterable[str] = ()) -> None:
        self.plugin_caps: Mapping[str, Cap] = {c.name: c for c in declared}
        self.problems: tuple[str, ...] = tuple(problems)
        self.names: frozenset[str] = CAP_UNIVERSE | frozenset(self.plugin_caps)
        self.consent_only: frozenset[str] = CONSENT_ONLY | frozenset(c.name for c in self.plugin_caps.values()
                                                                     if not c.profiles)
        self._by_profile: dict[str, frozenset[str]] = {
            n: frozenset(c.name for c in self.plugin_caps.values() if n in c.profiles) for n in PROFILES}

    @classmethod
    def from_brokers(cls, brokers: Iterable[Any], origin_of: Mapping[str, str] | None = None,
                     reserved: Iterable[str] = ()) -> Universe:
        """The universe declared by broker records (``wbcore_runtime.contract.records.Broker``);
        ``origin_of`` maps a cap to the distribution that serves it, for messages;
        ``reserved`` are import names no cap may take (the Dock's always-linked ones)."""
        caps: list[Cap] = []
        problems: list[str] = []
        reserved = frozenset(reserved)
        for b in brokers:
            origin = (origin_of or {}).get(b.name, "a plugin")
            profiles = tuple(getattr(b, "profiles", ()) or ())
            if b.name in reserved:
                problems.append(f"cap {b.name!r} ({origin}): the name is reserved (wb.{b.name} is linked "
                                f"for every guest; reserved: {', '.join(sorted(reserved))}); "
                                "left out: it grants nothing")
                continue
            if b.name in CAP_UNIVERSE:
                if profiles:
                    problems.append(f"cap {b.name!r} ({origin}): a core cap; its profiles are the core's, "
                                    f"the declared ones ({' '.join(profiles)}) are ignored")
                continue
            meaning = (getattr(b, "meaning", "") or "").strip()
            unknown = [p for p in profiles if p not in PROFILES]
            if not meaning:
                problems.append(f"cap {b.name!r} ({origin}): declares no meaning (Broker(meaning=...)); "
                                "left out: it grants nothing")
            elif unknown:
                problems.append(f"cap {b.name!r} ({origin}): unknown profile(s) {' '.join(unknown)}; "
                                f"known: {', '.join(PROFILE_ORDER)}; left out: it grants nothing")
            else:
                caps.append(Cap(b.name, meaning, profiles, origin))
        return cls(caps, problems)

    def caps_of(self, prof: Profile) -> frozenset[str]:
        """What ``prof`` grants here: its own caps plus the plugin caps that name it."""
        extra = self._by_profile.get(prof.name)
        return prof.caps | extra if extra else prof.caps

    def grantable_by(self, cap: str) -> tuple[str, ...]:
        """The profiles that grant ``cap`` (empty: explicit deployer consent only, or unknown)."""
        return tuple(n for n in PROFILE_ORDER if cap in self.caps_of(PROFILES[n]))


#: The core's caps alone: what a caller that has no runtime's universe knows (plugin caps grant
#: nothing there).
CORE = Universe()


def profile(name: str | None) -> Profile:
    """Resolve a profile name; anything unknown is ``compute`` (fail-closed)."""
    return PROFILES.get((name or "").strip(), PROFILES[FAIL_CLOSED])


def narrowest_for(caps: Iterable[str], universe: Universe = CORE) -> Profile:
    """The narrowest profile granting every known cap in ``caps`` (else ``compute``).
    Consent-only caps do not count: no profile grants them."""
    wanted = set(caps) & (universe.names - universe.consent_only)
    for name in PROFILE_ORDER:
        if wanted <= universe.caps_of(PROFILES[name]):
            return PROFILES[name]
    return PROFILES[FAIL_CLOSED]


def profile_for(declared_profile: str | None, caps: Iterable[str], universe: Universe = CORE) -> Profile:
    if declared_profile:
        return profile(declared_profile)
    return narrowest_for(caps, universe)


def effective_caps(
    prof: Profile,
    declared: Iterable[str],
    granted: Iterable[str] | None,
    consented: Iterable[str] = (),
    universe: Universe = CORE,
) -> frozenset[str]:
    """profile ∩ declared ∩ granted; ``granted=None`` means first-party (no consent step).

    ``consented`` are explicit deployer grants; of those, the consent-only caps
    (:data:`CONSENT_ONLY` and plugin caps no profile grants) are added when declared, since
    no profile ever grants them. ``universe`` is the runtime's (:class:`Universe`): a cap
    outside it is in no profile and in no consent-only set, so it is never granted.
    """
    declared = frozenset(declared)
    eff = universe.caps_of(prof) & declared
    if granted is not None:
        eff &= frozenset(granted)
    return eff | (universe.consent_only & declared & frozenset(consented))
