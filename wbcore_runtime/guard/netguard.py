"""The SSRF decision: may the host connect to this name, and to which checked address.

One function decides for every surface that opens a connection on a toolkit's behalf or
fetches what a toolkit names — the net/tcp/udp/tls brokers, ``BUILD_SRC`` sources (HTTP
through :mod:`wbcore_runtime.guard.fetch`, git through :mod:`wbcore_runtime.guard.gitfetch`),
``wbx toolkit install``, OCI, did:web, federation sources and the lanes' compiler and
upstream-source downloads from the configured package registries
(:mod:`wbcore_runtime.guard.registries`). Every fetch the product makes for a person or a build
takes its guard from :meth:`NetGuard.from_env` (the deployer's allowances below); a guest's
own egress (the net/browse/tcp/udp/tls brokers) takes it from :meth:`NetGuard.for_guests`,
which honours only ``WB_NET_ALLOW_PRIVATE_HOSTS`` (named hosts and networks, never a blanket
switch: every toolkit with a net cap would get it). A refusal names only the settings that
change the refusing guard's decision.

A destination is allowed only when *every* address its name resolves to is a public
unicast address; the connection then goes to that checked address (the *pin*), so a DNS
answer that changes between check and connect (rebinding) cannot move it. Denied:
loopback, RFC 1918, link-local (169.254.0.0/16 incl. 169.254.169.254, fe80::/10), CGNAT
100.64.0.0/10, ULA fc00::/7, unspecified, multicast, broadcast, reserved and
documentation ranges, and IPv6 forms that embed an IPv4 address (IPv4-mapped
``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, 6to4 ``2002::/16``, NAT64
``64:ff9b::/96`` and ``64:ff9b:1::/48``, Teredo ``2001::/32``) when the embedded address
is not public. Host literals are parsed the way C resolvers do (``inet_aton``), so
decimal ``2130706433``, octal ``0177.0.0.1``, hex ``0x7f.1`` and short ``127.1`` forms
are the addresses they encode.

Allowances, for local mirrors, corporate proxies and tests — explicit, never implied:

- ``allow_private=True`` (for sources, installs and every other product fetch:
  ``WB_ALLOW_PRIVATE_SOURCES=1``) lifts
  the address check entirely; a name must still resolve, and is still pinned.
- ``private_hosts`` (``WB_ALLOW_PRIVATE_HOSTS="mirror.corp 10.1.2.0/24"``): names, or
  address literals and networks, whose private addresses are allowed; every other
  destination keeps the full check.
- ``public`` — a test seam, never set by the product: addresses to *treat as public*, so a
  test can serve a "public" target on a dedicated loopback address (127.0.0.7) while every
  other loopback form stays denied. ``resolver`` replaces DNS in tests the same way.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from wbcore_runtime.contract.errors import CapabilityDenied, DnsError, InvalidArgs

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]
ENV_ALLOW_PRIVATE = "WB_ALLOW_PRIVATE_SOURCES"
ENV_ALLOW_PRIVATE_OLD = "WB_SOURCES_ALLOW_PRIVATE"  # the earlier spelling, still honoured
ENV_PRIVATE_HOSTS = "WB_ALLOW_PRIVATE_HOSTS"
ENV_GUEST_PRIVATE_HOSTS = "WB_NET_ALLOW_PRIVATE_HOSTS"
#: The refusal advice of :meth:`NetGuard.from_env` (every fetch the product makes for a person
#: or a build), of :meth:`NetGuard.for_guests` (a guest's own egress through the brokers) and
#: of a guard built by hand (tests), which no setting changes.
DEPLOYER_ADVICE = (f"a deployer allows a private mirror with {ENV_PRIVATE_HOSTS}=<host or network> "
                   f"or every private address with {ENV_ALLOW_PRIVATE}=1")
GUEST_ADVICE = ("a deployer lets toolkits reach a private host with "
                f"{ENV_GUEST_PRIVATE_HOSTS}=<host or network>")
FIXED_ADVICE = "private and reserved addresses are refused"

_V4 = [
    ("0.0.0.0/8", "this-network"), ("10.0.0.0/8", "RFC 1918 private"), ("100.64.0.0/10", "CGNAT"),
    ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local / cloud metadata"),
    ("172.16.0.0/12", "RFC 1918 private"), ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"), ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "RFC 1918 private"), ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"), ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved / broadcast"),
]
_V6 = [
    ("::/128", "unspecified"), ("::1/128", "loopback"), ("fc00::/7", "ULA"), ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"), ("ff00::/8", "multicast"), ("100::/64", "discard-only"),
    ("2001:db8::/32", "documentation"), ("2001:10::/28", "ORCHID"),
]
_V4_NETS = [(ipaddress.ip_network(n), why) for n, why in _V4]
_V6_NETS = [(ipaddress.ip_network(n), why) for n, why in _V6]
_NAT64 = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48")]
_NUMERIC = re.compile(r"^[0-9a-fA-FxX.]+$")


def _host_list(text: str) -> frozenset[str]:
    """``"mirror.corp, 10.1.2.0/24 127.0.0.1"`` as a set of lower-case entries."""
    return frozenset(h.strip().lower().rstrip(".") for h in re.split(r"[\s,]+", text) if h.strip())


class EgressDenied(CapabilityDenied):
    """The SSRF guard refused a destination (``reason`` is what the Dock's audit records)."""

    reason = "ssrf"


def parse_literal(host: str) -> IPAddress | None:
    """The address a host literal encodes (any inet_aton form, bracketed IPv6, zone ids), else None."""
    h = host.strip().rstrip(".") if not host.startswith("[") else host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if "%" in h:
        h = h.split("%", 1)[0]  # fe80::1%eth0: the zone does not change the address class
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    if _NUMERIC.match(h) and any(c.isdigit() for c in h):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None


def why_denied(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast destination (None when it is)."""
    if isinstance(ip, ipaddress.IPv6Address):
        for net, why in _V6_NETS:
            if ip in net:
                return why
        embedded: tuple[str, ipaddress.IPv4Address] | None = None
        if ip.ipv4_mapped is not None:
            embedded = ("IPv4-mapped", ip.ipv4_mapped)
        elif ip.sixtofour is not None:
            embedded = ("6to4", ip.sixtofour)
        elif ip.teredo is not None:
            embedded = ("Teredo", ip.teredo[1])
        elif any(ip in n for n in _NAT64):
            embedded = ("NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        elif int(ip) >> 32 == 0:
            embedded = ("IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if embedded is not None:
            inner = why_denied(embedded[1])
            return f"{embedded[0]} form of {embedded[1]} ({inner})" if inner else None
        if not ip.is_global:
            return "not globally routable"
        return None
    for net, why in _V4_NETS:
        if ip in net:
            return why
    if not ip.is_global:
        return "not globally routable"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Pin:
    """A checked destination: connect to ``ip``; ``host`` is for Host/SNI only."""

    host: str
    ip: str
    port: int

    @property
    def ip_for_url(self) -> str:
        return f"[{self.ip}]" if ":" in self.ip else self.ip


@dataclass
class NetGuard:
    resolver: Resolver = system_resolver
    public: frozenset[str] = field(default_factory=frozenset)  # test seam: see the module doc
    allow_private: bool = False
    private_hosts: frozenset[str] = field(default_factory=frozenset)
    max_addresses: int = 32
    #: How a name that does not resolve is reported: brokers deny it (a guest learns
    #: nothing more); sources and installs say it is a DNS failure (a person fixes it).
    unresolved_is_dns_error: bool = False
    #: What a refusal advises: only the settings that change *this* guard's decision (a
    #: refusal that names a setting the path ignores sends a deployer the wrong way).
    advice: str = FIXED_ADVICE

    @classmethod
    def from_env(cls, env: Mapping[str, str], **kw: object) -> NetGuard:
        """The guard for every fetch the product makes for a person or a build (sources, installs,
        OCI, did:web, federation, the lanes' registry downloads), with the deployer's allowances."""
        allow = env.get(ENV_ALLOW_PRIVATE, "") == "1" or env.get(ENV_ALLOW_PRIVATE_OLD, "") == "1"
        hosts = _host_list(env.get(ENV_PRIVATE_HOSTS, ""))
        return cls(allow_private=allow, private_hosts=hosts, unresolved_is_dns_error=True,
                   advice=DEPLOYER_ADVICE, **kw)  # type: ignore[arg-type]

    @classmethod
    def for_guests(cls, env: Mapping[str, str], **kw: object) -> NetGuard:
        """The guard for a guest's own egress: only the hosts and networks the deployer named in
        ``WB_NET_ALLOW_PRIVATE_HOSTS``; a name that does not resolve is a denial."""
        hosts = _host_list(env.get(ENV_GUEST_PRIVATE_HOSTS, ""))
        return cls(private_hosts=hosts, advice=GUEST_ADVICE, **kw)  # type: ignore[arg-type]

    def _allowed_private(self, ip: IPAddress, host: str) -> bool:
        if self.allow_private or host.lower().rstrip(".") in self.private_hosts:
            return True
        for entry in self.private_hosts:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        return False

    def check_ip(self, ip: IPAddress, shown: str) -> None:
        if str(ip) in self.public:
            return
        why = why_denied(ip)
        if why and not self._allowed_private(ip, shown):
            raise EgressDenied(f"egress to {shown} denied: {ip} is {why} (SSRF guard; {self.advice})")

    def _unresolved(self, host: str, why: str) -> Exception:
        if self.unresolved_is_dns_error:
            return DnsError(f"cannot resolve host {host!r} ({why}); check the name and this machine's DNS")
        return EgressDenied(f"egress to {host} denied: it does not resolve ({why})")

    def pin(self, host: str, port: int) -> Pin:
        """Resolve ``host``, deny unless every address is allowed, return the pinned address."""
        if not host or len(host) > 253 + 2:
            raise InvalidArgs(f"egress: invalid host {host!r}")
        if not 0 < port < 65536:
            raise InvalidArgs(f"egress: invalid port {port}")
        literal = parse_literal(host)
        if literal is not None:
            self.check_ip(literal, host)
            return Pin(host=host, ip=str(literal), port=port)
        name = host.rstrip(".").lower()
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise EgressDenied(f"egress to {host!r} denied: not a valid host name") from None
        try:
            answers = self.resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise self._unresolved(host, getattr(exc, "strerror", None) or type(exc).__name__) from None
        if not answers:
            raise self._unresolved(host, "no addresses")
        addrs: list[IPAddress] = []
        for a in answers[: self.max_addresses]:
            ip = parse_literal(a)
            if ip is None:
                raise EgressDenied(f"egress to {host} denied: resolver returned {a!r}")
            self.check_ip(ip, host)  # every answer must be allowed: no mixing a private record in
            addrs.append(ip)
        return Pin(host=name, ip=str(addrs[0]), port=port)
