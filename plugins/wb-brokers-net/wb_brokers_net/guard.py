"""NetGuard: the SSRF floor every host-mediated connection passes, and resolve-then-pin.

A destination is allowed only when *every* address its name resolves to is a public
unicast address; the connection then goes to that checked address (the *pin*), so a
DNS answer that changes between check and connect (rebinding) cannot move it. Denied:
loopback, RFC 1918, link-local (169.254.0.0/16 incl. 169.254.169.254, fe80::/10),
CGNAT 100.64.0.0/10, ULA fc00::/7, unspecified, multicast, broadcast, reserved and
documentation ranges, and IPv6 forms that embed an IPv4 address (IPv4-mapped
``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, 6to4 ``2002::/16``, NAT64
``64:ff9b::/96`` and ``64:ff9b:1::/48``, Teredo ``2001::/32``) when the embedded
address is not public. Host literals are parsed the way C resolvers do (``inet_aton``),
so decimal ``2130706433``, octal ``0177.0.0.1``, hex ``0x7f.1`` and short ``127.1``
forms are the addresses they encode. A name that does not resolve is denied.

Test seam (never used by the product): ``resolver`` replaces DNS, and ``public``
lists addresses to *treat as public* — tests serve "public" targets on a dedicated
loopback address (e.g. 127.0.0.7) and name it here, so every other loopback form in
the SSRF corpus stays denied. Both default to the real thing (``getaddrinfo``, empty).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from wbcore.dock import refuse
from wbcore.errors import CapabilityDenied, InvalidArgs

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

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
    max_addresses: int = 32

    def check_ip(self, ip: IPAddress, shown: str) -> None:
        if str(ip) in self.public:
            return
        why = why_denied(ip)
        if why:
            raise refuse(CapabilityDenied, "ssrf", f"egress to {shown} denied: {ip} is {why}")

    def pin(self, host: str, port: int) -> Pin:
        """Resolve ``host``, deny unless every address is public, return the pinned address."""
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
            raise refuse(CapabilityDenied, "ssrf", f"egress to {host!r} denied: not a valid host name") from None
        try:
            answers = self.resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise refuse(CapabilityDenied, "ssrf", f"egress to {host} denied: it does not resolve ({type(exc).__name__})") from None
        if not answers:
            raise refuse(CapabilityDenied, "ssrf", f"egress to {host} denied: it does not resolve")
        addrs: list[IPAddress] = []
        for a in answers[: self.max_addresses]:
            ip = parse_literal(a)
            if ip is None:
                raise refuse(CapabilityDenied, "ssrf", f"egress to {host} denied: resolver returned {a!r}")
            self.check_ip(ip, host)  # every answer must be public: no mixing a private record in
            addrs.append(ip)
        return Pin(host=name, ip=str(addrs[0]), port=port)
